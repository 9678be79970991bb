"""A partition's state as a base and deltas: what each state commit writes.

Layer: adapter (no Kafka, no RocksDB). Both places that keep a partition's state — the local
store (:mod:`dpsynth.stream.store`) and the state topic (:mod:`dpsynth.stream.changelog`) — keep
the same thing: a **base** (a whole snapshot, epoch e) and the **deltas** 1…s of epoch e since
(:mod:`dpsynth.state_delta`). :class:`StateLog` decides, at every commit, whether to write a
delta (the usual case: its size follows what the commit's records changed) or a new base (when
the deltas since the base add up to more than ``rebase_ratio`` times the state, or number
``max_deltas``): the bytes written per commit stay proportional to the records of the commit,
and a restore reads at most about (1 + ``rebase_ratio``) times the state.

Every commit goes to the state topic first (in the release transaction) and to the local store
after, with the same epoch and number: the local store is never ahead of the topic, at most one
commit behind it, and a commit recomputed after a crash from the local state overwrites the
topic's copy of that number with an equally valid one (same predecessor).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dpsynth.errors import StateCorruptError
from dpsynth.state import unpack_state
from dpsynth.state_delta import apply_delta, check, diff, encode, snapshot_digest

#: Deltas since the base may add up to this many times the state before a new base is written.
REBASE_RATIO = 1.0
#: Deltas per epoch at most (then a new base).
MAX_DELTAS = 1000


@dataclass
class StateCommit:
    """What one commit writes: a base (``delta`` None) or delta ``seq`` of ``epoch``."""

    epoch: int
    seq: int  # 0: the base; 1…: the deltas since it
    snapshot: bytes  # the whole state after the commit (kept in memory, written as a base)
    delta: bytes | None = None
    #: with a base: the sizes of the previous epoch's deltas (number → bytes), to delete
    dropped: dict[int, int] = field(default_factory=dict)
    #: a base installed after delta ``seq`` (a restore): the sizes of deltas 1…seq
    sizes: tuple[int, ...] = ()
    #: the decoded snapshot (the next commit's diff starts from it)
    state: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def is_base(self) -> bool:
        """True for a whole snapshot."""
        return self.delta is None

    @property
    def digest(self) -> bytes:
        """SHA-256 of the snapshot after the commit."""
        return snapshot_digest(self.snapshot)

    @property
    def nbytes(self) -> int:
        """Bytes of state this commit writes (the base or the delta)."""
        return len(self.snapshot) if self.delta is None else len(self.delta)


class StateLog:
    """Base + deltas bookkeeping of one partition (see the module docstring)."""

    def __init__(self, *, rebase_ratio: float = REBASE_RATIO,
                 max_deltas: int = MAX_DELTAS) -> None:
        self.rebase_ratio = rebase_ratio
        self.max_deltas = max_deltas
        self.epoch, self.seq = -1, 0
        self._snapshot: bytes | None = None
        self._state: dict[str, Any] | None = None
        self._sizes: list[int] = []  # bytes of deltas 1…seq

    def reset(self, snapshot: bytes | None, epoch: int = 0,
              sizes: tuple[int, ...] | list[int] = ()) -> None:
        """The committed state as loaded: ``snapshot`` is base ``epoch`` and the deltas of
        ``sizes`` (None: nothing committed yet). The next commit writes a new base: the state
        topic's base may be another snapshot than the local one (a restart after a commit that
        reached the topic only), and a delta must start from the base the reader holds."""
        self._snapshot = None  # the next commit is a base
        self._state = None
        self.epoch = epoch if snapshot is not None else -1
        self._sizes = list(sizes) if snapshot is not None else []
        self.seq = len(self._sizes)

    def next(self, snapshot: bytes) -> StateCommit:
        """The commit that takes the committed state to ``snapshot`` (not yet applied)."""
        if self._snapshot is None or self._state is None or self.seq >= self.max_deltas:
            return self._base(snapshot)
        new_state = unpack_state(snapshot, verify=False)  # made by this process just now
        delta = encode(diff(self._state, new_state), self._snapshot, snapshot)
        if sum(self._sizes) + len(delta) > self.rebase_ratio * max(len(snapshot), 1):
            return self._base(snapshot, new_state)
        return StateCommit(self.epoch, self.seq + 1, snapshot, delta=delta, state=new_state)

    def _base(self, snapshot: bytes, state: dict[str, Any] | None = None) -> StateCommit:
        dropped = dict(enumerate(self._sizes, start=1))
        return StateCommit(self.epoch + 1, 0, snapshot, dropped=dropped, state=state)

    def committed(self, commit: StateCommit) -> None:
        """``commit`` is written: it is the committed state now."""
        self._state = commit.state if commit.state is not None else unpack_state(commit.snapshot)
        self._snapshot = commit.snapshot
        self.epoch, self.seq = commit.epoch, commit.seq
        if commit.is_base:
            self._sizes = list(commit.sizes)
        else:
            assert commit.delta is not None
            self._sizes.append(len(commit.delta))

    @property
    def sizes(self) -> tuple[int, ...]:
        """Bytes of each delta of the current epoch."""
        return tuple(self._sizes)


def rebuild(base: bytes, deltas: list[bytes], digest: bytes) -> bytes:
    """The snapshot ``base`` with ``deltas`` applied in order, each starting where the one
    before ends (by digest), the result re-packed once and checked: its SHA-256 must be
    ``digest`` (StateCorruptError otherwise)."""
    if not deltas:
        if snapshot_digest(base) != digest:
            raise StateCorruptError("the base snapshot fails its digest")
        return base
    state, reached = unpack_state(base), snapshot_digest(base)
    for blob in deltas:
        state, reached = apply_delta(state, blob, reached)
    if reached != digest:
        raise StateCorruptError("the deltas do not end at the committed snapshot")
    return check(state, digest)
