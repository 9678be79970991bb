"""The privacy unit "user" of the online synthesizer: bounding, calibration, metadata (P15).

Layer: core. :class:`UserLevel` is what :class:`~dpsynth.online.synthesizer.OnlineSynthesizer`
holds when ``privacy_unit="user"``: the contribution bounds (:mod:`dpsynth.bounding`: the first k
records of each user count, at most c per step if capped), the keyed id hash, and the user-level
accounting — the mechanism runs at the per-record budget ε/k and its checked per-record loss,
times k, must not exceed ε (:func:`~dpsynth.accounting.units.user_level_loss`).

Its arguments are checked once, by :meth:`OnlineConfig.resolve
<dpsynth.online.config.OnlineConfig.resolve>`, which also refuses the unsound combinations:
under add/remove a user's records may be removed from any steps,
so time must be public steps (``guided``, ``adaptive``); ``paper`` counts time in records,
which is public only under replacement, where the user-to-position map is public too
(docs/privacy.md P9, P15).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from dpsynth.accounting.units import group_loss
from dpsynth.bounding import ContributionBounds, UserHasher, UserKeys
from dpsynth.errors import ConfigError, SchemaError
from dpsynth.noise import KeyedNoise


class _Feed(Protocol):
    """What :meth:`UserLevel.admitted` reads of the synthesizer: public time."""

    sequence: int

    def records_until_step(self) -> int: ...


def refuse_users(points: np.ndarray, users: Any) -> Iterator[np.ndarray]:
    """The points as one chunk (privacy unit "record"); ConfigError if ``users`` were given."""
    if users is not None:
        raise ConfigError("users= gives each record's user for privacy_unit='user'; this "
                          "synthesizer protects records (privacy_unit='record'): drop it")
    yield points


class UserLevel:
    """Contribution bounds and user-level accounting of one synthesizer (privacy: P15).

    Parameters
    ----------
    epsilon
        The user-level budget ε (what one user costs).
    max_contributions
        k: a user's records counted over the whole stream.
    per_step
        Optional c: a user's records counted per step.
    noise
        The run's keyed noise; the id hash uses a subkey of its key.
    """

    def __init__(self, epsilon: float, max_contributions: int, per_step: int | None,
                 noise: KeyedNoise) -> None:
        self.bounds = ContributionBounds(max_contributions, per_step)
        self.max_contributions = max_contributions
        self.per_step = per_step
        self.epsilon = float(epsilon)
        self.record_epsilon = self.epsilon / max_contributions  # as OnlineConfig's (P15)
        self._hasher = UserHasher(noise)
        #: Which records of the latest ``extend``/``add`` call counted (for evaluation tools).
        self.last_admitted = np.zeros(0, bool)

    def loss(self, record_loss: float) -> float:
        """The checked user-level loss k · ``record_loss`` (BudgetExceededError above ε)."""
        return group_loss(record_loss, self.max_contributions, self.epsilon)

    def keys(self, users: Sequence[Any] | np.ndarray | None, n: int) -> UserKeys:
        """The keyed hashes of one id per record (``users``: ids, or (n, 2) uint64 hashes)."""
        if users is None:
            raise ConfigError("privacy_unit='user' needs the user id of every record: pass "
                              "users=[...] (one id per point) to extend() or add()")
        if isinstance(users, np.ndarray) and users.dtype == np.uint64 and users.ndim == 2:
            keys = users  # already hashed (UserLevel.hash)
        else:
            keys = self.hash(users)
        if len(keys) != n:
            raise SchemaError(f"users ({len(keys)} ids) must hold one id per point ({n})")
        return keys

    def hash(self, users: Sequence[Any] | np.ndarray) -> UserKeys:
        """Keyed hashes of user ids (str, int or bytes; SchemaError naming a bad position)."""
        try:
            return self._hasher.hash_ids(users)
        except ValueError as e:
            raise SchemaError(f"{e}; fix the user id column") from None

    def admit(self, keys: UserKeys, step: int) -> np.ndarray:
        """Which records count (the first k of each user; c per step): a bool per record."""
        return self.bounds.admit(keys, step)  # privacy: P15

    def admitted(self, points: np.ndarray, users: Any, step: int) -> np.ndarray:
        """The points that count (the first k of each user, c per step), in order.

        Any number of points, none included: an empty call (a step whose records were all
        dead-lettered, or no record at all) admits nothing and is an ordinary empty step.
        """
        keys = self.keys(users, len(points))
        self.last_admitted = self.admit(keys, step)
        return points[self.last_admitted]

    def admitted_chunks(self, points: np.ndarray, users: Any,
                        feed: _Feed) -> Iterator[np.ndarray]:
        """The points that count, as chunks to feed one after the other (``extend``).

        One chunk, unless a per-step cap meets steps of ``release_every`` records: then a chunk
        ends where the open step may end, because the step id — the release sequence, public —
        must be read anew after each release.
        """
        if not self.per_step:
            yield self.admitted(points, users, feed.sequence)
            return
        keys = self.keys(users, len(points))
        self.last_admitted = np.zeros(len(points), bool)
        start = 0
        while start < len(points):
            take = feed.records_until_step()
            admitted = self.admit(keys[start:start + take], feed.sequence)
            self.last_admitted[start:start + take] = admitted
            yield points[start:start + take][admitted]
            start += take

    def metadata(self) -> dict[str, Any]:
        """Public release metadata of the unit (no user count, no dropped count)."""
        return {"privacy_unit": "user", "max_contributions": self.max_contributions,
                "max_contributions_per_step": self.per_step,
                "record_epsilon": self.record_epsilon}

    def config(self) -> dict[str, Any]:
        """Constructor arguments for a snapshot."""
        return {"privacy_unit": "user", "max_contributions": self.max_contributions,
                "max_contributions_per_step": self.per_step}
