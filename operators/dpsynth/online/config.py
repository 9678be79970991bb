"""The online synthesizer's configuration: one typed object, validated once.

Layer: core (standard library only). :meth:`OnlineConfig.resolve` is the one place where the
synthesizer's parameters are checked against their declarations (:mod:`dpsynth.params`: type,
bounds, choices), their combinations refused (the privacy unit, the neighbour notion, a
mechanism's time) and the derived values computed — ``"auto"`` resolved to the concrete
mechanism, the per-record ε under the privacy unit. Everything downstream
(:class:`~dpsynth.online.synthesizer.OnlineSynthesizer`, the mechanisms' builders in
:mod:`dpsynth.online.mechanism`) reads the resolved object and checks nothing again. The parsers
(the ``dpsynth run`` options, the worker's ``DPSYNTH_*`` settings) only read text into values
and hand them to :meth:`~OnlineConfig.resolve`.

>>> config = OnlineConfig.resolve(2, 1.0, 1000)
>>> config.mechanism, config.record_epsilon
('guided', 1.0)
>>> OnlineConfig.resolve(2, 4.0, 100, privacy_unit="user", max_contributions=4).record_epsilon
1.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpsynth.accounting import Schedule
from dpsynth.errors import ConfigError
from dpsynth.online.mechanism import (
    AUTO,
    PAPER_MAX_EPSILON,
    resolve_mechanism,
    step_mechanisms,
    takes_steps,
)
from dpsynth.params import DEFAULT_MAX_DEPTH, PARAMS

__all__ = ["OnlineConfig"]


def _checked(name: str, value: Any) -> Any:
    """``value`` by its declaration's rule (:meth:`~dpsynth.params.Param.check`)."""
    return PARAMS[name].check(value, name)


@dataclass(frozen=True)
class OnlineConfig:
    """The resolved parameters of one :class:`~dpsynth.online.OnlineSynthesizer` (no key).

    Build it with :meth:`resolve` (the constructor checks nothing). ``mechanism`` is concrete
    (``"auto"`` resolved); ``record_epsilon`` is the ε one record is protected at: ε, or ε/k
    under ``privacy_unit="user"`` (docs/privacy.md P15).
    """

    d: int
    epsilon: float
    release_every: int
    mechanism: str
    max_depth: int
    placement: str
    partition: int
    schedule: Schedule | None
    neighbours: str
    current_shape: str
    release_growth: float
    privacy_unit: str
    max_contributions: int | None
    max_contributions_per_step: int | None
    record_epsilon: float

    @classmethod
    def resolve(
        cls,
        d: int,
        epsilon: float,
        release_every: int,
        mechanism: str = AUTO,
        max_depth: int = DEFAULT_MAX_DEPTH,
        *,
        placement: str = "uniform",
        partition: int = 0,
        schedule: Schedule | None = None,
        neighbours: str = "replace",
        current_shape: str = "steps",
        release_growth: float = 0.0,
        privacy_unit: str = "record",
        max_contributions: int | None = None,
        max_contributions_per_step: int | None = None,
    ) -> OnlineConfig:
        """Check every argument once, refuse unsound combinations, resolve ``"auto"`` and the
        per-record ε: :class:`~dpsynth.errors.ConfigError` naming the first argument (or
        combination) refused, and its fix. The arguments are the synthesizer's (same names,
        same defaults).

        A custom ε allocation (``schedule``) with ``mechanism="auto"`` runs HVZ Alg 1
        (``paper``).
        """
        if not isinstance(d, int) or d < 1:
            raise ConfigError(f"d ({d!r}) must be an integer >= 1")
        if not isinstance(mechanism, str):
            raise ConfigError(f"mechanism ({mechanism!r}) must be a name; pass an ε allocation "
                              "as schedule=... with mechanism='paper'")
        if schedule is not None and not isinstance(schedule, Schedule):
            raise ConfigError(f"schedule ({schedule!r}) must be a dpsynth.accounting.Schedule; "
                              "the algorithm is chosen by mechanism=...")
        if schedule is not None and mechanism == AUTO:
            mechanism = "paper"  # a custom ε allocation runs HVZ Alg 1
        max_depth = _checked("max_depth", max_depth)
        placement = _checked("placement", placement)
        mechanism = _checked("mechanism", mechanism)
        epsilon = _checked("epsilon", epsilon)  # the one check of ε
        release_every = _checked("release_every", release_every)
        neighbours = _checked("neighbours", neighbours)
        privacy_unit = _checked("privacy_unit", privacy_unit)
        max_contributions = _checked("max_contributions", max_contributions)
        per_step = _checked("max_contributions_per_step", max_contributions_per_step)
        current_shape = _checked("current_shape", current_shape)
        partition = _checked("partition", partition)
        release_growth = _checked("release_growth", release_growth)
        user = privacy_unit == "user" and max_contributions is not None
        record_epsilon = epsilon / max_contributions if user else epsilon  # privacy: P15
        name = resolve_mechanism(mechanism, d, neighbours, record_epsilon)
        _check_unit(privacy_unit, max_contributions, per_step, neighbours, name)
        _check_time(name, neighbours, schedule, release_growth, d, record_epsilon)
        return cls(d, epsilon, release_every, name, max_depth, placement, partition, schedule,
                   neighbours, current_shape, release_growth, privacy_unit, max_contributions,
                   per_step, record_epsilon)

    @property
    def steps(self) -> bool:
        """True when the mechanism's time is public steps (else record counts)."""
        return takes_steps(self.mechanism)


def _check_unit(privacy_unit: str, max_contributions: int | None, per_step: int | None,
                neighbours: str, mechanism: str) -> None:
    """Refuse a bound without the user unit, the user unit without its bound, or an unsound
    combination of the user unit, add/remove and a mechanism counting records (P15)."""
    if privacy_unit == "record":
        if max_contributions is not None or per_step is not None:
            raise ConfigError("max_contributions bounds the records of a user: it needs "
                              "privacy_unit='user' (and a declared user id); drop it, or set "
                              "privacy_unit='user'")
        return
    if max_contributions is None:
        raise ConfigError("privacy_unit='user' needs max_contributions=k, the records of one "
                          "user counted over the whole stream (later ones are dropped), e.g. 16")
    steps = step_mechanisms()
    if neighbours == "add_remove" and mechanism not in steps:  # privacy: P15
        names = ", ".join(map(repr, steps[:-1])) + f" or {steps[-1]!r}"
        raise ConfigError(
            f"privacy_unit='user' with neighbours='add_remove' and mechanism={mechanism!r} is "
            "not sound: its time levels count records, and removing a user's records moves "
            f"every later level boundary. Combinations that work: mechanism {names} with "
            "either notion, or the others with neighbours='replace' (docs/privacy.md P15)"
        )


def _check_time(mechanism: str, neighbours: str, schedule: Schedule | None,
                release_growth: float, d: int, record_epsilon: float) -> None:
    """Refuse what the mechanism's time cannot do: record-count levels under add/remove
    (P9), a schedule off ``paper`` or for other values, ``paper`` above its ε, a growth of
    record-count steps (P11)."""
    if neighbours == "add_remove" and not takes_steps(mechanism):
        steps = step_mechanisms()
        raise ConfigError(
            f"neighbours='add_remove' needs mechanism={', '.join(map(repr, steps[:-1]))} or "
            f"{steps[-1]!r}: the time levels of the other mechanisms count records, and the "
            "record count is private under add/remove (docs/privacy.md P9)"
        )
    if schedule is not None and mechanism != "paper":
        raise ConfigError(f"schedule (an ε allocation) applies to mechanism='paper' only, not "
                          f"{mechanism!r}; drop it")
    if mechanism == "paper" and record_epsilon > PAPER_MAX_EPSILON:
        raise ConfigError(
            f"mechanism='paper' runs up to a per-record ε of {PAPER_MAX_EPSILON:g} (here "
            f"{record_epsilon:g}): HVZ Alg 1 opens 2^j cells at t_j = 2^j/ε, so above it every "
            "record pays for cells down to the tree's depth; use mechanism='auto' (offline "
            "PMM's error at large ε), or a smaller ε to reproduce the paper")
    if schedule is not None and (schedule.d != d or schedule.epsilon != record_epsilon):
        raise ConfigError(
            f"schedule '{schedule.name}' is for d={schedule.d}, epsilon={schedule.epsilon}; "
            f"build it with d={d}, epsilon={record_epsilon}"
        )
    if release_growth and not takes_steps(mechanism):
        steps_text = ", ".join(step_mechanisms())
        shown = mechanism if schedule is None else schedule.name  # as the releases name it
        raise ConfigError(f"release_growth needs a step mechanism ({steps_text}); "
                          f"{shown!r} counts records on fixed time levels: "
                          "leave release_growth at 0 or choose a step mechanism")
    if release_growth and neighbours == "add_remove":  # privacy: P9, P11
        raise ConfigError("release_growth grows steps counted in records, and under "
                          "neighbours='add_remove' the count is private: a step ends only "
                          "at step() on a public clock. Leave release_growth at 0 (tick "
                          "less often as the stream grows) or use neighbours='replace'")
