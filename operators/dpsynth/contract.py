"""The synthesizer contract: what every synthesizer offers, the public-time rule, the feed loop.

Layer: core. The point synthesizer (:class:`~dpsynth.online.synthesizer.OnlineSynthesizer`)
and the tabular one (:class:`~dpsynth.tabular.synthesizer.TabularSynthesizer`) implement
:class:`Synthesizer`; the worker (:mod:`dpsynth.stream.engines`), the commands and the audit
drive either through it and through :func:`feed` alone.

**Public time** (docs/privacy.md P9, P11). A step ends, and a release is made, only on public
time. Under add/remove neighbours the record count is private, so a step ends only at an
explicit :meth:`Synthesizer.step` or :meth:`Synthesizer.tick` (a timer, a tick marker, a
declared time bucket) — never after a number of records: :func:`refuse_count_steps` — and a
tick ends the step whether or not it holds records (whether it does is private). Under
replacement the count is public: :meth:`Synthesizer.extend` may end a step every
``release_every`` records, and a tick with no new record releases nothing
(:func:`tick_ends_step`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol, TypeVar

from dpsynth.errors import ConfigError

R = TypeVar("R")  # the release type (extend returns a list of them: invariant)
T = TypeVar("T")


class Synthesizer(Protocol[R]):
    """A continual ε-DP synthesizer fed records in public steps (module docstring).

    ``R`` is its release type (:class:`~dpsynth.release.Release` for points,
    :class:`~dpsynth.release.TabularRelease` for tables).
    """

    epsilon: float
    neighbours: str
    release_every: int
    #: The privacy unit "user": its contribution bounds (None: the unit "record").
    users: Any

    @property
    def sequence(self) -> int:
        """Releases made so far (public)."""

    @property
    def records_fed(self) -> int:
        """Valid records counted so far — the true count: never released under add/remove."""

    @property
    def open_records(self) -> int:
        """Records of the open step (not yet released)."""

    def records_until_step(self) -> int:
        """Records until :meth:`extend` ends the open step (replacement: a public count)."""

    @property
    def dropped(self) -> int:
        """Records over their user's bound, not counted (an operator metric; 0 per record)."""

    def add(self, records: Any, users: Any = None) -> None:
        """Records of the open step (``users``: each record's id under the privacy unit
        "user"); nothing is released."""

    def step(self) -> R:
        """End the open step now (on a public clock) and return its release."""

    def extend(self, records: Any, users: Any = None) -> list[R]:
        """Records, a step every ``release_every`` (replacement only, :func:`refuse_count_steps`);
        the releases completed."""

    def tick(self) -> R | None:
        """A public tick: end the step and release if due (:func:`tick_ends_step`)."""

    def snapshot(self, *, include_users: bool = True) -> bytes:
        """The whole state (raw data: the open step's records at the tree's resolution, exact
        counts; protect it as the raw events); no key material.
        ``include_users=False`` leaves out per-user counts stored apart (the worker's)."""

    def public_config(self) -> dict[str, Any]:
        """The public parameters a stored state is bound to (no secret, no partition)."""


def refuse_count_steps(neighbours: str, records: str = "add(records)") -> None:
    """ConfigError under add/remove: a step every ``release_every`` records would reveal the
    private count (privacy: P9, P11). ``records``: how to feed a step instead."""
    if neighbours == "add_remove":
        raise ConfigError(
            "extend() ends a step every release_every records, which reveals the private "
            f"record count under neighbours='add_remove'; feed the records of a step with "
            f"{records} and end each step with step() on a public clock (a timer, a tick "
            "marker or a declared time column), docs/privacy.md P9, P11")


def tick_ends_step(neighbours: str, new_records: bool) -> bool:
    """Whether a public tick ends the open step: always under add/remove (whether the step
    holds records is private), under replacement only when records came since the last
    release (the count is public; privacy: P11)."""
    return neighbours == "add_remove" or new_records


def feed(synth: Synthesizer[R], chunks: Iterable[tuple[T, Any]], *,
         steps: bool) -> Iterator[tuple[T, list[R]]]:
    """The embedded feed loop of every engine: yield each chunk's records with the releases
    it completed.

    ``chunks`` are ``(records, users)``. With ``steps`` each chunk is one public step (a time
    bucket, a batch of the paper's fixed size, an audit's step): added, then ended on that
    public clock. Without, chunks are consecutive records and releases come every
    ``release_every`` of them (replacement only, :func:`refuse_count_steps`).
    """
    for records, users in chunks:
        if steps:
            synth.add(records, users)
            yield records, [synth.step()]  # privacy: P11 (the chunk is the public step)
        else:
            yield records, synth.extend(records, users)


def feed_all(synth: Synthesizer[R], chunks: Iterable[tuple[Any, Any]], *,
             steps: bool) -> list[R]:
    """Every release of :func:`feed`, in order."""
    return [release for _, releases in feed(synth, chunks, steps=steps)
            for release in releases]
