"""One input partition's processing: skip, decode, feed, publish in a transaction, commit state.

Layer: adapter, free of Faust and Kafka (plain :class:`InputMessage` lists in, a transactional
sink out: :mod:`dpsynth.stream.output`), so the whole protocol is unit-tested without a broker.

The commit protocol (docs/design.md D12, exactly-once as consumers see it), per batch of messages:

1. Skip every message at or below the in-memory watermark (a replay after a restart).
2. After a (re)load, if the first new message lies beyond ``watermark + 1`` (the partition came
   without local state, or with a state older than the group's committed offset), read the
   missing offsets back from the input partition first (``replay``): the state is rebuilt from
   the same records with the same key. Their output was published by committed transactions
   already (the group's offset moved with them), so it is **dropped**, not published again.
3. Decode and check all records at once; invalid ones become dead letters with a reason.
4. Feed the valid rows to the partition's engine (:mod:`dpsynth.stream.engines`). A tick marker
   (:mod:`dpsynth.stream.ticks`) between the records ends a step there; it is never a record,
   and its offset enters the watermark like a record's (privacy: P11).
5. **Publish** (releases waited ``release_linger_s``, or before a state commit): one Kafka
   transaction holds every pending release, the newest one again in the latest view, the
   dead letters *and* the input offset ``watermark + 1`` of the input consumer group
   (:meth:`~dpsynth.stream.output.Output.publish`). All of it becomes visible to
   ``read_committed`` readers at once, or none of it.
6. **Commit the state** when due (``state_commit_interval_s`` after releases,
   ``checkpoint_interval_s``, ``max_unacked_events``, or the input idle): its delta (or a new
   base) goes to the state topic in the transaction of step 5, **then** into the local store
   with the watermark, atomically (:mod:`dpsynth.stream.persist`). The state is never ahead of
   the group's offset; behind it after a crash between the two, which step 2 repairs — from the
   state topic when the local state is missing or far behind, else by replay.

A crash between any two steps loses nothing, counts nothing twice, publishes nothing twice: an
open transaction is aborted (the next owner's producer fences the old one) and its input read
again; a committed one moved the group's offset with it; a state behind that offset is rebuilt
without output. Derived noise makes every recomputed release byte-identical.

Catching up (step 2): a partition whose state is behind the offset its group committed — no
local state, an old one, or a crash between a transaction and the state commit after it — is
brought forward before its first delivered message: from the state topic when the gap is long
(:mod:`dpsynth.stream.persist`), then by replaying the rest of the input (the replay reader and
the state topic's reader are injected: no Kafka here). Nothing of a replay is published: the
transactions that moved the group's offset published it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from dpsynth.stream.codecs import (
    DeadLetterHasher,
    dead_letter_key,
    encode_dead_letter,
    release_record_key,
)
from dpsynth.stream.crash import CrashPoints
from dpsynth.stream.engines import Engine, check_bound, open_engine, public_config
from dpsynth.stream.metrics import Metrics
from dpsynth.stream.output import Output, Topics, TransactionalSink
from dpsynth.stream.persist import PartitionState
from dpsynth.stream.phases import phase
from dpsynth.stream.points import points_records
from dpsynth.stream.settings import WorkerConfig
from dpsynth.stream.store import PartitionStore
from dpsynth.stream.ticks import Marker, MarkerKey, parse_marker

__all__ = ["InputMessage", "PartitionProcessor", "Replay"]

log = logging.getLogger(__name__)


#: Longest a release transaction stays open while a batch goes on (its timeout is 5 s).
TRANSACTION_SPAN_S = 1.0


@dataclass(frozen=True)
class InputMessage:
    """One raw-events message as the processor needs it."""

    offset: int
    value: bytes | None
    timestamp_ms: int | None = None
    received: float = 0.0  # time.monotonic() when the worker got it (release latency)
    key: bytes | None = None  # the Kafka key: the user id under the privacy unit "user"


#: replay(partition, start, end) yields the input messages of offsets [start, end), in order.
Replay = Callable[[int, int, int], Iterable[InputMessage]]
#: Messages fed per step while rebuilding a partition by replay.
REPLAY_BATCH = 5000


class PartitionProcessor:
    """The synthesizer, state store and commit protocol of one input partition.

    Not thread-safe: one caller at a time (the worker runs it in its input thread).
    ``state``: where the state is committed (the local store and the state topic), or
    ``store`` alone; ``latest_partitions``, ``output_partitions``, ``points_partitions``: the
    partition counts of the latest view, the synthetic and the points topics (the partition's
    records go to partition ``partition mod`` each:
    :func:`~dpsynth.stream.codecs.output_partition`).
    """

    def __init__(
        self,
        config: WorkerConfig,
        partition: int,
        *,
        sink: TransactionalSink,
        store: PartitionStore | None = None,
        state: PartitionState | None = None,
        metrics: Metrics | None = None,
        crash: CrashPoints | None = None,
        replay: Replay | None = None,
        progress: Callable[[], None] | None = None,
        latest_partitions: int = 1,
        output_partitions: int = 1,
        points_partitions: int = 1,
    ) -> None:
        self.config = config
        self.partition = int(partition)
        self.metrics = metrics or Metrics()
        if state is None:  # the local store only (no state topic)
            assert store is not None, "a store or a state is needed"
            state = PartitionState(store, run_id=config.run_id, partition=self.partition,
                                   metrics=self.metrics)
        self.state = state
        state.metrics = self.metrics  # one registry for the partition
        self.store = state.store
        self.sink = sink
        self.crash = crash or CrashPoints(None)
        self.replay = replay
        self.progress = progress or (lambda: None)  # liveness: a long replay is not stuck
        self._public_config = public_config(config)
        key = config.noise_key  # read once: the property loads it
        self._markers = MarkerKey(key.reveal(), config.run_id)
        self._letters = DeadLetterHasher(key)  # keyed digests in dead letters (privacy)
        self.last_tick_ms = -1  # period of the last tick marker applied (in the state)
        started = time.perf_counter()
        self.synth, self.committed, latest_records = self._load()
        self.metrics.observe("state_load_seconds", self.partition, time.perf_counter() - started)
        self.watermark = self.committed  # last offset fed to the synthesizer (in memory)
        #: last input offset whose output is committed (the group's offset − 1); at least the
        #: state's: the state is only ever committed after the transaction covering it
        self.published = self.committed
        self.output = Output(
            run_id=config.run_id, partition=self.partition,
            topics=Topics(config.output_topic, config.dead_letter_topic,
                          config.latest_topic_name, max(int(latest_partitions), 1),
                          None if config.points_format == "none" else config.points_topic,
                          output_partitions=max(int(output_partitions), 1),
                          points_partitions=max(int(points_partitions), 1)),
            sink=sink, points=lambda release: points_records(config, release, self.partition),
            encode=lambda release: self.synth.encode(
                release, run_id=config.run_id, partition=self.partition,
                max_chunk_bytes=config.release_max_record_bytes),
            history_key=lambda sequence: release_record_key(config.run_id, self.partition,
                                                            sequence),
            linger_s=config.release_linger_s, latest_interval_s=config.latest_interval_s,
            latest_records=latest_records, metrics=self.metrics, crash=self.crash)
        self._fresh = True  # no message seen since the load: check for a gap once
        self.replaying = False  # feeding offsets whose output was published already
        self._unacked = 0
        self._published_since_commit = False
        self._last_commit = time.monotonic()
        self._set_gauges()

    # -- loading ---------------------------------------------------------------------------

    def _load(self) -> tuple[Engine, int, int]:
        stored = self.state.load()
        if stored is None:
            phase(f"restoring partition {self.partition}", "no local state; starting at t=0")
            return open_engine(self.config, self.partition, None, self.store), -1, 0
        check_bound(self.config, self._public_config, stored.config, self.partition,
                    self.store.path)
        synth = open_engine(self.config, self.partition, stored.snapshot, self.store)
        self.last_tick_ms = stored.last_tick_ms
        phase(f"restoring partition {self.partition}",
              f"state restored at t={synth.t}, sequence {synth.sequence}, watermark offset "
              f"{stored.watermark} ({len(stored.snapshot)} bytes, from the local state)")
        return synth, stored.watermark, stored.latest_records

    # -- catching up (step 2) --------------------------------------------------------------

    def _from_state_topic(self, first: int) -> None:
        """Adopt the state topic's state when it is newer than the local one (and older than
        ``first``, the group's offset: it always is)."""
        stored = self.state.newer_from_topic(self.watermark, first)
        if stored is None:
            return
        check_bound(self.config, self._public_config, stored.config, self.partition,
                    self.state.topic)
        self.synth = open_engine(self.config, self.partition, stored.snapshot, self.store)
        self.committed = self.watermark = stored.watermark
        self.last_tick_ms = stored.last_tick_ms
        self.output.latest_records = max(self.output.latest_records, stored.latest_records)

    def _catch_up(self, first: int) -> None:
        """Feed offsets (watermark, first) read back from the input partition, in batches,
        dropping their output: the transactions that moved the group's offset to ``first``
        published it."""
        start = self.watermark + 1
        log.warning(
            "partition %d: the first input offset delivered (%d) is beyond the local state "
            "(watermark %d); replaying offsets [%d, %d) from the input partition to rebuild it",
            self.partition, first, self.watermark, start, first,
        )
        assert self.replay is not None
        self.replaying, started = True, time.perf_counter()
        batch: list[InputMessage] = []
        replayed = 0
        try:
            for message in self.replay(self.partition, start, first):
                if message.offset >= first:
                    break
                batch.append(message)
                if len(batch) >= REPLAY_BATCH:
                    replayed += self._feed_replayed(batch)
                    batch = []
            if batch:
                replayed += self._feed_replayed(batch)
        finally:
            self.replaying = False
        self.published = max(self.published, first - 1)
        self.metrics.observe("replay_seconds", self.partition, time.perf_counter() - started)
        phase(f"restoring partition {self.partition}",
              f"{replayed} messages replayed from the input partition in "
              f"{time.perf_counter() - started:.1f} s (t={self.synth.t})")

    def _feed_replayed(self, batch: list[InputMessage]) -> int:
        self.metrics.inc("messages_replayed", self.partition, len(batch))
        self.feed(batch)
        self.output.discard()  # published by the transactions that moved the group's offset
        if self.checkpoint_due():
            self.commit()
        self.progress()
        return len(batch)

    # -- processing ------------------------------------------------------------------------

    def process(self, messages: list[InputMessage]) -> int:
        """Run the commit protocol on ``messages`` (offset order); return :attr:`published`,
        the last input offset whose output (and group offset) is committed."""
        if messages and self._fresh:
            self._fresh = False
            first = next((m.offset for m in messages if m.offset > self.watermark), None)
            if first is not None and first > self.watermark + 1:
                if first - self.watermark - 1 > self.config.max_unacked_events:
                    self._from_state_topic(first)  # cheaper than replaying a long gap
                if first > self.watermark + 1 and self.replay is not None:
                    self._catch_up(first)
        new = [m for m in messages if m.offset > self.watermark]
        if len(new) < len(messages):
            self.metrics.inc("records_skipped", self.partition, len(messages) - len(new))
        if new:
            self.feed(new)
        self.settle()
        self._set_gauges()
        return self.published

    def settle(self, *, idle: bool = False) -> int:
        """Commit the state when due, else publish what is due; return :attr:`published`.

        Due: a checkpoint (:meth:`checkpoint_due`), or releases published or pending and
        ``state_commit_interval_s`` passed since the last commit (or the input is ``idle``);
        a publish when releases waited ``release_linger_s`` or the latest view is due.
        """
        now = time.monotonic()
        if self.checkpoint_due(now) or self._commit_due(now, idle=idle):
            self.commit()
        elif (self.output.releases_due(now) or self.output.latest_due(now)
              or self.output.open_since is not None):  # never left open across polls
            self.publish()
        return self.published

    def _publish_early(self, now: float) -> None:
        """Mid-batch: send the releases into the open transaction (the broker takes them
        while the batch goes on), committing it once it has been open :data:`TRANSACTION_SPAN_S`
        (well under its timeout), or the state when due."""
        opened = self.output.open_since
        if self._commit_due(now):
            self.commit()
        elif opened is not None and now - opened >= TRANSACTION_SPAN_S:
            self.publish()
        else:
            self.output.send()

    def _commit_due(self, now: float, *, idle: bool = False) -> bool:
        if (not (self.output.releases_waiting or self._published_since_commit
                 or self.output.open_since is not None)
                or self.watermark == self.committed):
            return False
        return idle or now - self._last_commit >= self.config.state_commit_interval_s

    def feed(self, new: list[InputMessage]) -> None:
        """Feed messages in offset order: runs of records, cut at tick markers."""
        start = 0
        for i, message in enumerate(new):
            marker = parse_marker(message.value)
            if marker is None:
                continue
            if i > start:
                self._feed_records(new[start:i])
            self._apply_marker(message, marker)
            start = i + 1
        if start < len(new):
            self._feed_records(new[start:])

    def _apply_marker(self, message: InputMessage, marker: Marker) -> None:
        """End the step at a tick marker of this run (a later period than the last applied)."""
        p = self.partition
        if not self._markers.accepts(marker, p) or marker.at_ms <= self.last_tick_ms:
            # another run's marker, a bad tag, or a second marker of an applied period
            self.metrics.inc("tick_markers_skipped", p)
        else:
            releases = self.synth.tick()  # privacy: P11 (steps end at public ticks)
            self.last_tick_ms = marker.at_ms
            done = time.monotonic()
            for release in releases:
                self.output.add_release(release, message.received, done)
            self.metrics.inc("tick_markers", p)
            self.metrics.inc("ticks", p, len(releases))
        self.metrics.inc("messages_in", p)
        self.watermark = message.offset
        self._unacked += 1

    def _feed_records(self, new: list[InputMessage]) -> None:
        config, p = self.config, self.partition
        batch = self.synth.split([m.value for m in new], [m.key for m in new])
        dropped = self.synth.dropped
        for index, rejects in sorted(batch.rejects.items()):  # in offset order
            m = new[index]
            self.output.add_dead_letter(
                dead_letter_key(config.input_topic, p, m.offset),
                encode_dead_letter(
                    value=m.value, topic=config.input_topic, partition=p, offset=m.offset,
                    timestamp_ms=m.timestamp_ms, rejects=rejects,
                    n_records=int(batch.records_per_message[index]), hasher=self._letters,
                    prefix_bytes=config.dead_letter_prefix_bytes,
                ),
            )
            if m.value is not None and len(m.value) > config.dead_letter_prefix_bytes:
                self.metrics.inc("dead_letter_bytes_dropped", p,
                                 len(m.value) - config.dead_letter_prefix_bytes)
            self.metrics.inc("dead_lettered_messages", p)
            self.metrics.inc("dead_lettered_records", p, len(rejects))
        self.metrics.inc("messages_in", p, len(new))
        self.metrics.inc("records_in", p, len(batch.points))
        self.metrics.inc("clipped_values", p, batch.clip_report.total)
        # Feed tick by tick (cut at message boundaries), so that a large batch still publishes
        # its releases every release_linger_s instead of all at its end (release latency).
        valid_end = np.cumsum(batch.valid_per_message)
        first, start = 0, 0
        while first < len(new):
            need = self.synth.until_release()  # None: no release by count (add/remove)
            last = (len(new) - 1 if need is None else
                    min(int(np.searchsorted(valid_end, start + need)), len(new) - 1))
            end = int(valid_end[last])
            releases = self.synth.extend(
                batch.points[start:end], None if batch.users is None else batch.users[start:end])
            done = time.monotonic()
            # at most one tick completes per cut, with message ``last`` (its last record): the
            # release latency starts when that message arrived
            for release in releases:
                self.output.add_release(release, new[last].received, done)
            self.metrics.inc("ticks", p, len(releases))
            self.watermark = new[last].offset
            self._unacked += last + 1 - first
            if self.synth.mid_step:
                self.crash.reached("mid_tick")  # records of an open step or tick
            first, start = last + 1, end
            if first < len(new) and not self.replaying and self.output.releases_due(done):
                self._publish_early(done)  # latency: do not wait for the batch's end
        self.metrics.inc("records_dropped", p, self.synth.dropped - dropped)

    def checkpoint_due(self, now: float | None = None) -> bool:
        """True when processed messages wait too long (or are too many) for a state commit."""
        if self.watermark == self.committed:
            return False
        now = time.monotonic() if now is None else now
        return (
            self._unacked >= self.config.max_unacked_events
            or now - self._last_commit >= self.config.checkpoint_interval_s
        )

    def publish(self, *, final: bool = False, state: list | None = None) -> None:
        """Publish the pending output, ``state`` (the state topic's records of a commit) and the
        input offset in one transaction (step 5); during a replay, drop the output instead
        (published already). ``final`` (the partition is handed over or the worker stops): the
        latest view gets the newest release now."""
        if self.replaying:
            self.output.discard()
            if state:
                self.output.publish(None, extra=state)  # the state topic follows the store
            return
        offset = self.watermark + 1 if self.watermark > self.published else None
        if self.output.publish(offset, latest=final, extra=state):
            self.published = max(self.published, self.watermark)
            self._published_since_commit = True

    def commit(self, *, final: bool = False) -> int:
        """Publish with the state's delta, then commit it locally (step 6); return the state's
        watermark. ``final``: see :meth:`publish`."""
        p = self.partition
        if self.watermark == self.committed:
            self.publish(final=final)
        else:
            start = time.perf_counter()
            users = self.synth.take_user_changes()
            meta = {"watermark": self.watermark, "t": self.synth.t,
                    "sequence": self.synth.sequence, "config": self._public_config,
                    "last_tick_ms": self.last_tick_ms,
                    "latest_records": self.output.latest_records}
            commit, records = self.state.prepare(self.synth.snapshot(), meta, users)
            self.publish(final=final, state=records)
            stats = self.state.commit(commit, meta=meta, users=users)
            self.synth.committed()
            self.metrics.observe("state_commit_seconds", p, time.perf_counter() - start)
            self.metrics.inc("state_commits", p)
            self.metrics.inc("state_chunks_written", p, stats.chunks_written)
            self.metrics.inc("state_bytes_written", p, stats.bytes_written)
            self.metrics.set("state_bytes", p, stats.snapshot_bytes)
            self.metrics.set("state_chunks", p, stats.chunks_total)
            self.committed = self.watermark
            self.crash.reached("after_state_commit")
        self._unacked = 0
        self._published_since_commit = False
        self._last_commit = time.monotonic()
        self._set_gauges()
        self.progress()
        return self.committed

    def _set_gauges(self) -> None:
        p = self.partition
        self.metrics.set("t", p, self.synth.t)
        self.metrics.set("sequence", p, self.synth.sequence)
        self.metrics.set("watermark", p, self.committed)
        self.metrics.set("published", p, self.published)
        self.metrics.set("unacked_events", p, self._unacked)

    def close(self) -> None:
        """Close the state store (uncommitted records are simply re-read after a restart)."""
        self.store.close()
