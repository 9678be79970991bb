"""Where one partition's state is committed: its local store and the state topic, as deltas.

Layer: adapter (no Kafka: the state topic's records are handed to the release transaction by
the processor; its reader is injected). :class:`PartitionState` ties together the local RocksDB
store (:mod:`dpsynth.stream.store`), the base + deltas bookkeeping
(:mod:`dpsynth.stream.statelog`) and the state topic (:mod:`dpsynth.stream.changelog`):

- :meth:`PartitionState.load` — the local state; without one, the state topic's (installed in
  the local store first): a partition that moves to a worker without its disk restores in time
  proportional to its state, not to its input history;
- :meth:`PartitionState.newer_from_topic` — the state topic's state when it is newer than the
  local one (a partition coming back to a worker whose copy is far behind);
- :meth:`PartitionState.prepare` — the next commit (a delta, or a base) and the records it adds
  to the release transaction; :meth:`PartitionState.commit` — then the local store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from dpsynth.bounding import UserCounts
from dpsynth.stream.changelog import Record, Restored, state_records
from dpsynth.stream.codecs import output_partition
from dpsynth.stream.metrics import Metrics
from dpsynth.stream.phases import phase
from dpsynth.stream.statelog import StateCommit, StateLog
from dpsynth.stream.store import CommitStats, PartitionStore, StoredState

log = logging.getLogger(__name__)


class PartitionState:
    """The committed state of one input partition (see the module docstring).

    ``topic``/``topic_partitions``: the state topic (None: local only); ``restore(partition)``
    reads it back (:func:`~dpsynth.stream.changelog.make_restore`).
    """

    def __init__(self, store: PartitionStore, *, run_id: str, partition: int,
                 topic: str | None = None, topic_partitions: int = 1,
                 restore: Callable[[int], Restored | None] | None = None,
                 metrics: Metrics | None = None) -> None:
        self.store = store
        self.run_id, self.partition = run_id, int(partition)
        self.topic = topic
        self.where = output_partition(self.partition, topic_partitions)
        self.restore = restore if topic is not None else None
        self.metrics = metrics or Metrics()
        self.log = StateLog()
        self._base: dict[str, Any] = {}  # the state topic's base, as its manifests describe it
        self._next_base: dict[str, Any] = {}

    def load(self) -> StoredState | None:
        """The local state; without one, the state topic's (installed locally first)."""
        stored = self.store.load()
        if stored is None and self.restore is not None:
            restored = self._read_topic()
            if restored is not None:
                self._install(restored)
                stored = self.store.load()
        self.log.reset(None if stored is None else stored.snapshot,
                       0 if stored is None else stored.epoch,
                       () if stored is None else stored.sizes)
        self._base = {}
        return stored

    def newer_from_topic(self, watermark: int, before: int) -> StoredState | None:
        """The state topic's state, installed locally, when its watermark lies in
        (``watermark``, ``before``); else None."""
        if self.restore is None:
            return None
        restored = self._read_topic()
        if restored is None or not watermark < restored.watermark < before:
            return None
        self._install(restored)
        return self.load()

    def _read_topic(self) -> Restored | None:
        assert self.restore is not None
        start = time.perf_counter()
        restored = self.restore(self.partition)
        if restored is not None:
            self.metrics.inc("state_restores", self.partition)
            self.metrics.observe("state_restore_seconds", self.partition,
                                 time.perf_counter() - start)
            phase(f"restoring partition {self.partition}",
                  f"state restored from the state topic {self.topic} at watermark "
                  f"{restored.watermark} ({restored.records_read} records, "
                  f"{len(restored.snapshot)} bytes, in {time.perf_counter() - start:.1f} s)")
        return restored

    def _install(self, restored: Restored) -> None:
        self.store.commit(
            restored.snapshot, watermark=restored.watermark, t=restored.t,
            sequence=restored.sequence, config=restored.config,
            last_tick_ms=restored.last_tick_ms, users=restored.users,
            latest_records=restored.latest_records, state=restored.commit())

    def prepare(self, snapshot: bytes, meta: dict[str, Any], users: UserCounts | None
                ) -> tuple[StateCommit, list[Record]]:
        """The next commit of ``snapshot`` and its state-topic records (``meta``: watermark, t,
        sequence, config, last_tick_ms, latest_records)."""
        commit = self.log.next(snapshot)
        if self.topic is None:
            return commit, []
        sizes = (*self.log.sizes, len(commit.delta)) if commit.delta is not None else (
            commit.sizes)
        records, self._next_base = state_records(
            self.topic, self.where, self.run_id, self.partition, commit,
            {**meta, "sizes": list(sizes)}, users, self._base)
        self.metrics.inc("state_topic_bytes_written", self.partition,
                         sum(len(r[2] or b"") + len(r[1]) for r in records))
        return commit, records

    def commit(self, commit: StateCommit, *, meta: dict[str, Any],
               users: UserCounts | None) -> CommitStats:
        """Write ``commit`` to the local store (after the transaction with its records)."""
        stats = self.store.commit(commit.snapshot, users=users, state=commit, **meta)
        self.log.committed(commit)
        if self.topic is not None:
            self._base = self._next_base
        return stats
