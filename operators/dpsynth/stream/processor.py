"""One input partition's processing: skip, decode, feed, produce, commit — in that order.

Layer: adapter, and deliberately free of Faust: :class:`PartitionProcessor` takes plain
:class:`InputMessage` lists and a :class:`Sink`, so the whole protocol is unit-tested without a
broker; ``app.py`` only moves Faust events in and acknowledgements out.

The commit protocol (DESIGN §3 "Exactly-once as consumers see it"), per batch of messages:

1. Skip every message at or below the in-memory watermark (a replay after a restart).
2. After a (re)load, if the first new message lies beyond ``watermark + 1`` (the partition came
   without local state, or with older state than the group's committed offset), read the missing
   offsets back from the input partition first (``replay``): the state is rebuilt from the same
   records with the same key, so its releases are byte-identical to the ones already published.
3. Decode and check all records at once; invalid ones go to the dead-letter topic with a reason.
4. Feed the valid rows to the partition's engine (:mod:`dpsynth.stream.engines`): the point
   synthesizer (:class:`~dpsynth.online.synthesizer.OnlineSynthesizer`) or the tabular one.
   A tick marker (:mod:`dpsynth.stream.ticks`) between the records ends a step there; it is
   never a record, and its offset enters the watermark like a record's (privacy: P11).
5. Releases that waited ``release_linger_s``: produce every record of every release and wait
   until the broker has them all (and every dead letter) (:meth:`PartitionProcessor.publish`).
6. When a state commit is due (``state_commit_interval_s`` after releases,
   ``checkpoint_interval_s``, ``max_unacked_events``, or the input idle): publish, **then**
   commit the snapshot and the watermark atomically (:class:`~dpsynth.stream.store.
   PartitionStore`); **then** report the watermark, up to which the caller may acknowledge
   input offsets. Publishing never waits for a state commit (an fsync and a snapshot: the
   costly part), so under load the state is committed about once per interval.

A crash between any two steps loses nothing and counts nothing twice: uncommitted records are
re-read (their offsets were not acknowledged), committed ones are skipped, and a release
re-produced after a crash is byte-identical (derived noise), so consumers drop it as a duplicate.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dpsynth.errors import ConfigError
from dpsynth.stream.codecs import dead_letter_key, encode_dead_letter, release_record_key
from dpsynth.stream.crash import CrashPoints
from dpsynth.stream.engines import Engine, bound_variable, open_engine, public_config
from dpsynth.stream.metrics import Metrics
from dpsynth.stream.points import points_records
from dpsynth.stream.settings import WorkerConfig
from dpsynth.stream.store import PartitionStore
from dpsynth.stream.ticks import Marker, MarkerKey, parse_marker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InputMessage:
    """One raw-events message as the processor needs it."""

    offset: int
    value: bytes | None
    timestamp_ms: int | None = None
    received: float = 0.0  # time.monotonic() when the worker got it (release latency)
    key: bytes | None = None  # the Kafka key: the user id under the privacy unit "user"


class Sink(Protocol):
    """Where releases and dead letters go (the confluent-kafka producer, or a test fake)."""

    def send(self, topic: str, key: bytes, value: bytes, partition: int | None = None) -> None:
        """Queue one record for delivery (order per key is kept; ``partition``: a tick
        marker into its input partition)."""

    def flush(self) -> None:
        """Block until every queued record is delivered; raise if any delivery failed."""


#: replay(partition, start, end) yields the input messages of offsets [start, end), in order.
Replay = Callable[[int, int, int], Iterable[InputMessage]]
#: Messages fed per step while rebuilding a partition by replay.
REPLAY_BATCH = 5000


class PartitionProcessor:
    """The synthesizer, state store and commit protocol of one input partition.

    Not thread-safe: one caller at a time (the worker runs it in a single executor thread).
    """

    def __init__(
        self,
        config: WorkerConfig,
        partition: int,
        *,
        store: PartitionStore,
        sink: Sink,
        metrics: Metrics | None = None,
        crash: CrashPoints | None = None,
        replay: Replay | None = None,
        progress: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.partition = int(partition)
        self.store = store
        self.sink = sink
        self.metrics = metrics or Metrics()
        self.crash = crash or CrashPoints(None)
        self.replay = replay
        self._progress = progress or (lambda: None)  # liveness: a long replay is not stuck
        self._public_config = public_config(config)
        self._markers = MarkerKey(config.noise_key.reveal(), config.run_id)
        self.last_tick_ms = -1  # period of the last tick marker applied (in the state)
        self.synth, self.committed = self._load()
        self.watermark = self.committed  # last offset fed to the synthesizer (in memory)
        self._fresh = True  # no message seen since the load: check for a gap once
        # completed, not yet produced: (release, arrival of its last record, completion)
        self._releases: list[tuple[Any, float, float]] = []
        self._unacked = 0
        self._published = False  # releases published since the last state commit
        self._in_flight: list[tuple[float, int]] = []  # produced, not yet acknowledged
        self._last_commit = time.monotonic()
        self._set_gauges()

    # -- loading ---------------------------------------------------------------------------

    def _load(self) -> tuple[Engine, int]:
        stored = self.store.load()
        if stored is None:
            log.info("partition %d: no local state; starting at t=0", self.partition)
            return open_engine(self.config, self.partition, None, self.store), -1
        stored_engine = stored.config.get("engine", "points")
        if stored_engine != self.config.engine:
            raise ConfigError(
                f"DPSYNTH_ENGINE ({self.config.engine}) differs from the engine partition "
                f"{self.partition}'s state in {self.store.path} was built with "
                f"({stored_engine}); set DPSYNTH_ENGINE={stored_engine}, or start a new run (new "
                "DPSYNTH_RUN_ID and noise key, empty DPSYNTH_DATA_DIR)"
            )
        for name, value in self._public_config.items():
            if stored.config.get(name) != value:
                raise ConfigError(
                    f"{bound_variable(name)} differs from the one partition {self.partition}'s "
                    f"state in {self.store.path} was built with ({name}); the parameters of a "
                    "run cannot change. Restore the previous setting, or start a new run (new "
                    "DPSYNTH_RUN_ID and noise key, empty DPSYNTH_DATA_DIR)"
                )
        synth = open_engine(self.config, self.partition, stored.snapshot, self.store)
        self.last_tick_ms = stored.last_tick_ms
        log.info("partition %d: state restored at t=%d, sequence %d, watermark offset %d",
                 self.partition, synth.t, synth.sequence, stored.watermark)
        return synth, stored.watermark

    # -- processing ------------------------------------------------------------------------

    def process(self, messages: list[InputMessage]) -> int:
        """Run the commit protocol on ``messages`` (offset order); return the committed watermark.

        The caller may acknowledge every input offset at or below the returned value.
        """
        if messages and self._fresh:
            self._fresh = False
            first = next((m.offset for m in messages if m.offset > self.watermark), None)
            if first is not None and first > self.watermark + 1 and self.replay is not None:
                self._catch_up(first)
        new = [m for m in messages if m.offset > self.watermark]
        if len(new) < len(messages):
            self.metrics.inc("records_skipped", self.partition, len(messages) - len(new))
        if new:
            self._feed(new)
        self.settle()
        self._set_gauges()
        return self.committed

    def settle(self, *, idle: bool = False) -> int:
        """Commit when due, else publish due releases; return the committed watermark.

        Due: a checkpoint (:meth:`checkpoint_due`), or releases published or pending and
        ``state_commit_interval_s`` passed since the last commit (or the input is ``idle``).
        """
        if self.checkpoint_due() or self._commit_due(idle=idle):
            self.commit()
        elif self.releases_due() or self._in_flight:
            self.publish()
        return self.committed

    def _commit_due(self, now: float | None = None, *, idle: bool = False) -> bool:
        if (not (self._releases or self._in_flight or self._published)
                or self.watermark == self.committed):
            return False
        now = time.monotonic() if now is None else now
        return idle or now - self._last_commit >= self.config.state_commit_interval_s

    def _catch_up(self, first: int) -> None:
        """Feed offsets (watermark, first) read back from the input partition, in batches."""
        start = self.watermark + 1
        log.warning(
            "partition %d: the first input offset delivered (%d) is beyond the local state "
            "(watermark %d); replaying offsets [%d, %d) from the input partition to rebuild it",
            self.partition, first, self.watermark, start, first,
        )
        assert self.replay is not None
        batch: list[InputMessage] = []
        replayed = 0
        for message in self.replay(self.partition, start, first):
            if message.offset >= first:
                break
            batch.append(message)
            if len(batch) >= REPLAY_BATCH:
                replayed += self._feed_replayed(batch)
                batch = []
        if batch:
            replayed += self._feed_replayed(batch)
        log.info("partition %d: replayed %d messages; t=%d", self.partition, replayed,
                 self.synth.t)

    def _feed_replayed(self, batch: list[InputMessage]) -> int:
        self.metrics.inc("messages_replayed", self.partition, len(batch))
        self._feed(batch)
        self.settle()
        return len(batch)

    def _feed(self, new: list[InputMessage]) -> None:
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
            self._releases.extend((release, message.received, done) for release in releases)
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
            self.sink.send(
                config.dead_letter_topic,
                dead_letter_key(config.input_topic, p, m.offset),
                encode_dead_letter(
                    value=m.value, topic=config.input_topic, partition=p, offset=m.offset,
                    timestamp_ms=m.timestamp_ms, rejects=rejects,
                    n_records=int(batch.records_per_message[index]),
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
        # Feed tick by tick (cut at message boundaries), so that a large batch still commits
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
                self._releases.append((release, new[last].received, done))
            self.metrics.inc("ticks", p, len(releases))
            self.watermark = new[last].offset
            self._unacked += last + 1 - first
            if self.synth.until_release() != config.release_every:
                self.crash.reached("mid_tick")  # records of an open step or tick
            first, start = last + 1, end
            if first < len(new) and self.releases_due(done):  # latency: publish mid-batch
                self.commit() if self._commit_due(done) else self.publish(wait=False)
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

    def releases_due(self, now: float | None = None) -> bool:
        """True when a completed release has waited ``release_linger_s`` to be published."""
        if not self._releases:
            return False
        now = time.monotonic() if now is None else now
        return now - self._releases[0][2] >= self.config.release_linger_s

    def publish(self, *, wait: bool = True) -> None:
        """Produce the pending releases; with ``wait``, wait until the broker has every record
        produced so far (releases and dead letters). The state is not committed: after a crash
        the same releases are recomputed from the last committed state and published again,
        byte-identical (derived noise), so consumers drop them as duplicates."""
        p, config = self.partition, self.config
        for position, (release, arrived, _) in enumerate(self._releases):
            sequence, records = self.synth.encode(
                release, run_id=config.run_id, partition=p,
                max_chunk_bytes=config.release_max_record_bytes,
            )
            key = release_record_key(config.run_id, p, sequence)
            if position == 0 and self.crash.armed("mid_release"):
                half = max(1, len(records) // 2)
                for record in records[:half]:
                    self.sink.send(config.output_topic, key, record)
                self.sink.flush()
                self.crash.reached("mid_release")
                records = records[half:]
            for record in records:
                self.sink.send(config.output_topic, key, record)
            for record in points_records(config, release, p):  # DPSYNTH_POINTS_FORMAT
                self.sink.send(config.points_topic, key, record)
                self.metrics.inc("points_records", p)
            self._in_flight.append((arrived, len(records)))
        self._releases = []
        if wait:
            self._delivered()

    def _delivered(self) -> None:
        """Wait for the broker's acknowledgement of everything produced; count the releases."""
        self.sink.flush()  # every release record and dead letter is on the broker now
        if not self._in_flight:
            return
        p, delivered = self.partition, time.monotonic()
        for arrived, _ in self._in_flight:
            self.metrics.observe("release_latency_seconds", p, max(delivered - arrived, 0.0))
        self.metrics.inc("releases", p, len(self._in_flight))
        self.metrics.inc("release_records", p, sum(n for _, n in self._in_flight))
        self._in_flight = []
        self.crash.reached("after_release_produced")
        self._published = True

    def commit(self) -> int:
        """Publish pending releases, then commit state and watermark atomically."""
        p = self.partition
        self.publish()
        if self.watermark != self.committed:
            start = time.perf_counter()
            stats = self.store.commit(
                self.synth.snapshot(), watermark=self.watermark, t=self.synth.t,
                sequence=self.synth.sequence, config=self._public_config,
                last_tick_ms=self.last_tick_ms, users=self.synth.take_user_changes(),
            )
            self.synth.committed()
            self.metrics.observe("state_commit_seconds", p, time.perf_counter() - start)
            self.metrics.inc("state_commits", p)
            self.metrics.inc("state_chunks_written", p, stats.chunks_written)
            self.metrics.inc("state_bytes_written", p, stats.bytes_written)
            self.metrics.set("state_bytes", p, stats.snapshot_bytes)
            self.metrics.set("state_chunks", p, stats.chunks_total)
            self.committed = self.watermark
            self.crash.reached("after_state_commit_before_ack")
        self._unacked = 0
        self._published = False
        self._last_commit = time.monotonic()
        self._set_gauges()
        self._progress()
        return self.committed

    def _set_gauges(self) -> None:
        p = self.partition
        self.metrics.set("t", p, self.synth.t)
        self.metrics.set("sequence", p, self.synth.sequence)
        self.metrics.set("watermark", p, self.committed)
        self.metrics.set("unacked_events", p, self._unacked)

    def close(self) -> None:
        """Close the state store (uncommitted records are simply re-read after a restart)."""
        self.store.close()
