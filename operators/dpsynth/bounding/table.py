"""Contribution bounds per user: the first k records of each user count, later ones are dropped.

Layer: core. :class:`ContributionBounds` keeps, per user (a 128-bit keyed hash,
:mod:`dpsynth.bounding.ids`), how many of its records were counted — and, with a per-step cap c,
how many in the current step — in an open-addressing table (linear probing, compiled), and
decides for a batch of records, in order, which count: a record counts iff its user has fewer
than k counted records so far (and fewer than c in this step). The decision depends only on the
user's own earlier records and on public step boundaries, never on another user: removing one
user's records leaves every other record's decision unchanged, which is what makes user-level
neighbours map to record-level ones (docs/privacy.md P15). It is a function of the input order
alone, so a replay, a restart from a snapshot, or a rebuilt partition drops exactly the same
records.

Memory: 19 bytes per slot (29 with a per-step cap) at a load of at most 3/4. A slot holds the
two hash words side by side (one cache line per probe); the low bit of the second word is set
on the way in, so 0 marks an empty slot (127 of the 128 bits remain: P15's collision bound
uses 2^-127). The worker keeps only
the users it met since the last eviction in memory and the rest in RocksDB: it sets a
``resolver`` that reads missing users from the store, and writes :meth:`take_changes` in the
same atomic batch as the synthesizer's state (:mod:`dpsynth.stream.store`).

>>> bounds = ContributionBounds(max_contributions=2)
>>> keys = np.array([[1, 7], [1, 7], [2, 9], [1, 7]], np.uint64)
>>> bounds.admit(keys, step=0).tolist(), bounds.users, bounds.dropped
([True, True, True, False], 2, 1)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from dpsynth.bounding.ids import UserKeys
from dpsynth.errors import ConfigError
from dpsynth.params import MAX_CONTRIBUTIONS

# columns of the table: dirty flags, counts, steps
_U8 = NDArray[np.uint8]
_U16 = NDArray[np.uint16]
_I64 = NDArray[np.int64]
_LOAD = 0.75  # grow the table beyond this load factor
_MIN_CAPACITY = 1024


@dataclass(frozen=True)
class UserCounts:
    """Counted records of some users: ``keys`` (m, 2) uint64 and ``counts``; with a per-step
    cap also the step of the latest counted record and how many were counted in it."""

    keys: UserKeys
    counts: np.ndarray
    steps: np.ndarray | None = None
    step_counts: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.counts.size)


#: resolver(keys) -> the stored counts of those keys (count 0: never seen).
Resolver = Callable[[UserKeys], UserCounts]


class ContributionBounds:
    """The first ``max_contributions`` records of each user count (P15); later ones are dropped.

    Parameters
    ----------
    max_contributions
        k ≥ 1: records of one user counted over the whole stream.
    per_step
        Optional c ≤ k: records of one user counted per step (the step id is passed to
        :meth:`admit`; steps are public time).
    """

    def __init__(self, max_contributions: int, per_step: int | None = None) -> None:
        if (isinstance(max_contributions, bool) or not isinstance(max_contributions, int)
                or not 1 <= max_contributions <= MAX_CONTRIBUTIONS):
            raise ConfigError(f"max_contributions ({max_contributions!r}) must be an integer in "
                              f"[1, {MAX_CONTRIBUTIONS}]")
        if per_step is not None and (isinstance(per_step, bool) or not isinstance(per_step, int)
                                     or not 1 <= per_step <= max_contributions):
            raise ConfigError(f"max_contributions_per_step ({per_step!r}) must be an integer in "
                              f"[1, max_contributions = {max_contributions}], or unset")
        self.max_contributions = max_contributions
        self.per_step = per_step
        self.dropped = 0  # records over a bound (an operator metric, never released)
        #: Reads users missing from memory (the worker's store); not called while the table
        #: is ``complete`` — holds every user ever counted, so a missing user is a new one.
        self.resolver: Resolver | None = None
        self.complete = True
        self._allocate(_MIN_CAPACITY)

    def _allocate(self, capacity: int) -> None:
        self._keys = np.zeros((capacity, 2), np.uint64)  # second word 0: an empty slot
        self._counts = np.zeros(capacity, np.uint16)
        self._dirty = np.zeros(capacity, np.uint8)
        size = capacity if self.per_step else 1  # per-step arrays only when capped
        self._steps = np.zeros(size, np.int64)
        self._step_counts = np.zeros(size, np.uint16)
        self._size = 0

    @property
    def users(self) -> int:
        """Users held in memory (all users for the library; since the last eviction for the
        worker). Private data: an operator metric at most, never released."""
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes of the table."""
        return sum(a.nbytes for a in (self._keys, self._counts, self._dirty, self._steps,
                                      self._step_counts))

    def admit(self, keys: UserKeys, step: int) -> np.ndarray:
        """Which records of a batch count (bool per record, in order); updates the counts.

        ``keys`` are the records' user hashes (:class:`~dpsynth.bounding.ids.UserHasher`),
        ``step`` the public id of the open step (used by the per-step cap only).
        """
        keys = _normalised(keys)
        if self.resolver is not None and not self.complete and keys.size:
            self._resolve(keys)
        self._reserve(len(keys))
        out = np.empty(len(keys), np.bool_)
        self._size += _admit(self._keys, self._counts, self._steps, self._step_counts,
                             self._dirty, keys, np.int64(step), self.max_contributions,
                             self.per_step or 0, out)  # privacy: P15 (first k per user)
        self.dropped += int(len(out) - out.sum())
        return out

    def _reserve(self, extra: int) -> None:
        capacity = len(self._keys)
        while self._size + extra > _LOAD * capacity:
            capacity *= 2
        if capacity != len(self._keys):
            self._rehash(capacity)

    def _rehash(self, capacity: int) -> None:
        old = (self._keys, self._counts, self._dirty, self._steps, self._step_counts)
        size = self._size
        self._allocate(capacity)
        _insert(self._keys, self._counts, self._steps, self._step_counts, self._dirty, *old,
                self.per_step is not None)  # one sequential pass over the old table
        self._size = size

    def _insert(self, keys: UserKeys, counts: np.ndarray, dirty: np.ndarray,
                steps: np.ndarray, step_counts: np.ndarray) -> None:
        keys = _normalised(keys)
        self._reserve(len(keys))
        self._size += _insert(self._keys, self._counts, self._steps, self._step_counts,
                              self._dirty, keys, counts.astype(np.uint16), dirty,
                              steps.astype(np.int64), step_counts.astype(np.uint16),
                              self.per_step is not None)

    def _resolve(self, keys: UserKeys) -> None:
        """Load the users of ``keys`` that are not in memory from the resolver (the store)."""
        assert self.resolver is not None
        missing = keys[~_present(self._keys, keys)]
        if not missing.size:
            return
        missing = np.unique(missing.view(np.dtype((np.void, 16))).ravel()).view(
            np.uint64).reshape(-1, 2)
        stored = self.resolver(missing)
        found = np.flatnonzero(stored.counts)
        if found.size:
            steps, step_counts = self._step_fields(stored.steps, stored.step_counts, found)
            self._insert(stored.keys[found], stored.counts[found], np.zeros(found.size, np.uint8),
                         steps, step_counts)

    def _step_fields(self, steps: np.ndarray | None, step_counts: np.ndarray | None,
                     which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The per-step fields of entries ``which`` (placeholders without a per-step cap)."""
        if not self.per_step:
            return np.zeros(1, np.int64), np.zeros(1, np.uint16)
        if steps is None or step_counts is None:  # stored without a cap: none in this step
            return np.full(which.size, -1, np.int64), np.zeros(which.size, np.uint16)
        return np.asarray(steps)[which], np.asarray(step_counts)[which]

    # -- persistence ----------------------------------------------------------------------

    def _entries(self, which: np.ndarray) -> UserCounts:
        order = np.lexsort((self._keys[which, 1], self._keys[which, 0]))
        which = which[order]
        keys = self._keys[which]
        if self.per_step:
            return UserCounts(keys, self._counts[which].copy(), self._steps[which].copy(),
                              self._step_counts[which].copy())
        return UserCounts(keys, self._counts[which].copy())

    def take_changes(self) -> UserCounts:
        """The users whose counts changed since the last call, sorted by key (for the store's
        atomic commit); marks them clean."""
        changed = np.flatnonzero(self._dirty)
        self._dirty[changed] = 0
        return self._entries(changed)

    def evict(self) -> None:
        """Forget every user held in memory (the worker, after a commit wrote them all); from
        now on missing users are read through the resolver."""
        if self._dirty.any():
            raise RuntimeError("evict() with uncommitted user counts; call take_changes() first")
        self._allocate(_MIN_CAPACITY)
        self.complete = False

    def preload(self, stored: UserCounts | None) -> None:
        """Hold every stored user (``stored``: all of them), or, for None (too many to hold),
        read missing users through the resolver from now on."""
        if stored is None:
            self.complete = False
            return
        found = np.flatnonzero(stored.counts)
        steps, step_counts = self._step_fields(stored.steps, stored.step_counts, found)
        self._insert(stored.keys[found], stored.counts[found], np.zeros(found.size, np.uint8),
                     steps, step_counts)
        self.complete = True

    def state(self) -> dict[str, Any]:
        """Every user's counts (sorted by key: the same bytes for the same counts) and the
        dropped total, for a snapshot."""
        entries = self._entries(np.flatnonzero(self._keys[:, 1]))
        out: dict[str, Any] = {"keys": entries.keys, "counts": entries.counts,
                               "dropped": self.dropped}
        if self.per_step:
            out["steps"], out["step_counts"] = entries.steps, entries.step_counts
        return out

    def load_state(self, state: dict[str, Any]) -> None:
        """Inverse of :meth:`state`."""
        keys = np.asarray(state["keys"], np.uint64).reshape(-1, 2)
        self._allocate(_MIN_CAPACITY)
        self.dropped = int(state["dropped"])
        steps, step_counts = self._step_fields(state.get("steps"), state.get("step_counts"),
                                               np.arange(len(keys)))
        self._insert(keys, np.asarray(state["counts"]), np.zeros(len(keys), np.uint8), steps,
                     step_counts)


def _normalised(keys: UserKeys) -> UserKeys:
    """Contiguous (n, 2) uint64 keys with the low bit of the second word set (never 0)."""
    keys = np.array(keys, dtype=np.uint64, copy=True).reshape(-1, 2)
    keys[:, 1] |= np.uint64(1)
    return keys


@njit(cache=True, inline="always")
def _slot(keys: UserKeys, khi: np.uint64, klo: np.uint64) -> np.int64:
    """The slot holding (khi, klo), or the empty slot where it belongs (linear probing)."""
    mask = np.uint64(keys.shape[0] - 1)
    i = np.int64(klo & mask)
    while keys[i, 1] != 0 and not (keys[i, 1] == klo and keys[i, 0] == khi):
        i = np.int64((np.uint64(i) + np.uint64(1)) & mask)
    return i


@njit(cache=True)
def _admit(table: UserKeys, counts: _U16, steps: _I64, step_counts: _U16, dirty: _U8,
           keys: UserKeys, step: np.int64, k: int, c: int, out: NDArray[np.bool_]) -> int:
    """Decide each record in order: count it iff its user's total < k (and step count < c)."""
    added = 0
    for i in range(keys.shape[0]):
        s = _slot(table, keys[i, 0], keys[i, 1])
        if table[s, 1] == 0:
            table[s, 0], table[s, 1], counts[s] = keys[i, 0], keys[i, 1], 0
            added += 1
            if c > 0:
                steps[s], step_counts[s] = step, 0
        elif c > 0 and steps[s] != step:
            steps[s], step_counts[s] = step, 0
        if counts[s] < k and (c == 0 or step_counts[s] < c):
            counts[s] += 1
            if c > 0:
                step_counts[s] += 1
            dirty[s] = 1
            out[i] = True
        else:
            out[i] = False
    return added


@njit(cache=True)
def _insert(table: UserKeys, counts: _U16, steps: _I64, step_counts: _U16, dirty: _U8,
            keys: UserKeys, src_counts: _U16, src_dirty: _U8, src_steps: _I64,
            src_step_counts: _U16, has_steps: bool) -> int:
    """Insert entries with a count (distinct keys); returns how many were new."""
    added = 0
    for j in range(keys.shape[0]):
        if src_counts[j] == 0 or keys[j, 1] == 0:  # nothing counted, or an empty slot
            continue
        s = _slot(table, keys[j, 0], keys[j, 1])
        if table[s, 1] == 0:
            added += 1
        table[s, 0], table[s, 1] = keys[j, 0], keys[j, 1]
        counts[s], dirty[s] = src_counts[j], src_dirty[j]
        if has_steps:
            steps[s], step_counts[s] = src_steps[j], src_step_counts[j]
    return added


@njit(cache=True)
def _present(table: UserKeys, keys: UserKeys) -> NDArray[np.bool_]:
    out = np.empty(keys.shape[0], np.bool_)
    for i in range(keys.shape[0]):
        out[i] = table[_slot(table, keys[i, 0], keys[i, 1]), 1] != 0
    return out
