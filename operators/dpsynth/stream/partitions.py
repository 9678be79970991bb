"""The worker's state outside Faust: one partition processor per assigned input partition.

Layer: adapter. :class:`Operator` opens a partition's state, transactional producer and
:class:`~dpsynth.stream.processor.PartitionProcessor` when the partition is assigned (the
producer first: it fences the partition's previous owner), hands it its batches and checkpoints,
and closes them when it is revoked. The input thread (:mod:`dpsynth.stream.intake`) calls it;
the Faust app (:mod:`dpsynth.stream.app`) starts its tick marker writer and serves its metrics
and probes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from dpsynth.stream.changelog import make_restore
from dpsynth.stream.crash import CrashPoints
from dpsynth.stream.health import Health
from dpsynth.stream.metrics import Metrics
from dpsynth.stream.output import TransactionalSink
from dpsynth.stream.persist import PartitionState
from dpsynth.stream.processor import InputMessage, PartitionProcessor
from dpsynth.stream.replay import make_replay
from dpsynth.stream.settings import WorkerConfig
from dpsynth.stream.sink import KafkaSink, transactional_id
from dpsynth.stream.sink import TransactionalSink as KafkaTransactionalSink
from dpsynth.stream.store import PartitionStore
from dpsynth.stream.ticker import MarkerSink, MarkerWriter, TickClock
from dpsynth.stream.ticks import MarkerKey

__all__ = ["Operator"]

log = logging.getLogger(__name__)


class Operator:
    """The worker's state outside Faust: one :class:`PartitionProcessor` per assigned partition.

    Not thread-safe: every method runs in the input thread (:mod:`dpsynth.stream.intake`).
    ``sinks(partition)`` makes a partition's transactional producer (default: Kafka's, see
    :mod:`dpsynth.stream.sink`); ``marker_sink`` receives the tick markers of its
    :attr:`ticker` (``None`` when ``DPSYNTH_TICK_SECONDS`` is 0) on ``tick_clock``;
    ``latest_partitions``, ``state_partitions``, ``output_partitions`` and
    ``points_partitions`` are the partition counts of the latest view, the state, the synthetic
    and the points topics (each input partition writes to partition ``p mod`` each).
    """

    def __init__(self, config: WorkerConfig, *,
                 sinks: Callable[[int], TransactionalSink] | None = None,
                 marker_sink: MarkerSink | None = None, tick_clock: TickClock | None = None,
                 latest_partitions: int = 1, state_partitions: int = 1,
                 output_partitions: int = 1, points_partitions: int = 1) -> None:
        self.config = config
        self.make_sink = sinks or self._kafka_sink
        self.latest_partitions = latest_partitions
        self.output_partitions = output_partitions
        self.points_partitions = points_partitions
        self.state_partitions = state_partitions
        state_topic = config.state_topic_name
        self.restore = None if state_topic is None else make_restore(
            config.bootstrap_servers(), state_topic, config.run_id)
        #: the input consumer's group metadata (set by the input loop): the offsets of a
        #: release transaction are committed in that group
        self.group_metadata: Callable[[], Any] | None = None
        self.metrics = Metrics()
        self.health = Health(config.liveness_timeout_s)
        self.crash = CrashPoints(config.crash_at)
        self.replay = make_replay(config.bootstrap_servers(), config.input_topic)
        self.processors: dict[int, PartitionProcessor] = {}
        self.sinks: dict[int, TransactionalSink] = {}
        self.ticker: MarkerWriter | None = None
        if config.tick_seconds > 0:  # privacy: P11 (public time on its own timer)
            self.ticker = MarkerWriter(
                config.input_topic, config.tick_seconds,
                MarkerKey(config.noise_key.reveal(), config.run_id),
                marker_sink or KafkaSink(config.bootstrap_servers(),
                                         client_id=f"dpsynth-{config.run_id}-ticks"),
                clock=tick_clock, metrics=self.metrics)
        self.tick_seen: dict[int, tuple[int, float]] = {}  # partition → (ticks, when counted)

    def _kafka_sink(self, partition: int) -> TransactionalSink:
        c = self.config
        return KafkaTransactionalSink(
            c.bootstrap_servers(), transactional_id(c.run_id, c.input_topic, partition),
            input_topic=c.input_topic, partition=partition,
            group_metadata=lambda: self.group_metadata() if self.group_metadata else None,
            timeout_s=c.transaction_timeout_s, call_timeout_s=3 * c.transaction_timeout_s,
            client_id=f"dpsynth-{c.run_id}-p{partition}")

    def _open(self, partition: int) -> PartitionProcessor:
        c = self.config
        store = PartitionStore(
            c.data_dir / "state" / f"p{partition}", partition=partition, run_id=c.run_id,
            chunk_bytes=c.state_chunk_bytes, block_cache_bytes=c.rocksdb_block_cache_bytes,
            write_buffer_bytes=c.rocksdb_write_buffer_bytes, sync=c.state_sync,
        )
        sink = None
        try:
            sink = self.make_sink(partition)  # fences the partition's previous owner first
            state = PartitionState(store, run_id=c.run_id, partition=partition,
                                   topic=c.state_topic_name,
                                   topic_partitions=self.state_partitions,
                                   restore=self.restore, metrics=self.metrics)
            proc = PartitionProcessor(
                c, partition, state=state, sink=sink, metrics=self.metrics,
                crash=self.crash, replay=self.replay, progress=self.health.progressed,
                latest_partitions=self.latest_partitions,
                output_partitions=self.output_partitions,
                points_partitions=self.points_partitions,
            )
        except BaseException:
            store.close()
            _close(sink)
            raise
        self.sinks[partition] = sink
        return proc

    def processor(self, partition: int) -> PartitionProcessor:
        """The partition's processor, loading its state on first use after an assignment."""
        proc = self.processors.get(partition)
        if proc is None:
            proc = self.processors[partition] = self._open(partition)
            self.tick_seen[partition] = (proc.synth.sequence, time.monotonic())
        return proc

    def handle(self, by_partition: dict[int, list[InputMessage]]) -> dict[int, int]:
        """Process one batch (messages by partition, offset order); the published offsets
        (each partition's last input offset whose output and group offset are committed)."""
        committed = {}
        for partition, messages in by_partition.items():
            if partition not in self.processors:  # revoked meanwhile: re-read by its owner
                continue
            committed[partition] = self.processors[partition].process(messages)
        self.health.progressed()
        return committed

    def checkpoint(self, *, idle: bool = False) -> dict[int, int]:
        """Publish releases and commit states that are due (everything uncommitted when the
        last poll brought nothing: ``idle``); the published offsets."""
        return {partition: proc.settle(idle=idle)
                for partition, proc in list(self.processors.items())}

    def commit_all(self) -> dict[int, int]:
        """Publish and commit every partition's processed input (a graceful stop)."""
        return {partition: proc.commit(final=True)
                for partition, proc in list(self.processors.items())}

    def observe_ticks(self) -> None:
        """``dpsynth_tick_age_seconds``: time since each partition's last release."""
        now = time.monotonic()
        for partition, proc in self.processors.items():
            ticks, since = self.tick_seen.get(partition, (-1, now))
            if proc.synth.sequence != ticks:
                ticks, since = proc.synth.sequence, now
                self.tick_seen[partition] = (ticks, since)
            self.metrics.set("tick_age_seconds", partition, now - since)

    def assign(self, partitions: list[int]) -> None:
        """Start their tick markers, then load the state of newly assigned partitions now
        (metrics show them at once)."""
        if self.ticker is not None:
            self.ticker.own(partitions)
        for partition in partitions:
            self.processor(partition)

    def revoke(self, partitions: list[int], *, commit: bool = False) -> None:
        """Close the processors and producers of revoked partitions and drop their metric
        series; their state reloads on reassignment. With ``commit`` (a rebalance, not a lost
        session) each first publishes and commits what it processed, so that the next owner
        need not replay it; a failure there loses nothing (the transaction aborts, the next
        owner reads the records again)."""
        if self.ticker is not None:
            self.ticker.disown(partitions)
        for partition in partitions:
            proc = self.processors.pop(partition, None)
            self.tick_seen.pop(partition, None)
            if proc is not None:
                if commit:
                    try:
                        proc.commit(final=True)
                    except Exception as e:  # noqa: BLE001 - the next owner redoes it
                        log.warning("partition %d: commit at revocation failed (%s: %s); the "
                                    "next owner reads its uncommitted input again", partition,
                                    type(e).__name__, e)
                proc.close()
                log.info("partition %d revoked: state closed at watermark %d, output published "
                         "through offset %d", partition, proc.committed, proc.published)
            _close(self.sinks.pop(partition, None))
            self.metrics.remove_partition(partition)

    def close(self) -> None:
        """Close every partition's state and producer (the worker stops)."""
        for partition in list(self.processors):
            self.processors.pop(partition).close()
            _close(self.sinks.pop(partition, None))


def _close(sink: object) -> None:
    """Close a partition's producer if it has a ``close`` (the test kit's may not); a failure
    is logged, never raised (the partition is being given up anyway)."""
    close = getattr(sink, "close", None)
    if close is not None:
        try:
            close()
        except Exception as e:  # noqa: BLE001 - closing must not stop a rejoin or a stop
            log.warning("a partition's producer did not close cleanly (%s: %s)",
                        type(e).__name__, e)
