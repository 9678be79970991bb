"""The Faust app of the worker: topics, one agent, rebalance hooks, /metrics.

Layer: adapter, kept thin: the protocol lives in :mod:`dpsynth.stream.processor`. Settings that
matter, and why (``docs/operator.md`` has the long form):

- one agent with ``concurrency=1`` over the raw-events topic: a partition's state is sequential,
  and Faust can skip an in-flight message when concurrency > 1 (faust-streaming #606);
- events are taken with ``noack_take`` (no automatic acknowledgement) and acknowledged only once
  the state that includes them is committed, so Faust never commits an input offset beyond the
  persisted watermark; the events of an open tick stay unacknowledged;
- ``stream_wait_empty=False``: a rebalance must not wait for the unacknowledged events of an open
  tick (they are re-read after the rebalance, and skipped up to the watermark);
- no Faust tables, no changelog topics, no standby replicas, ``processing_guarantee`` at least
  once: state is our own RocksDB database per partition (:mod:`dpsynth.stream.store`);
- heavy work (decode, synthesizer, snapshot, RocksDB) runs in one executor thread, so the event
  loop keeps heart-beating to the group coordinator during long ticks;
- a timer writes one tick marker per owned input partition per ``DPSYNTH_TICK_SECONDS``
  (:mod:`dpsynth.stream.ticks`) into that partition: public time that replays see too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import faust
from faust.types import TP, EventT, StreamT

from dpsynth.stream.crash import CrashPoints
from dpsynth.stream.metrics import Metrics
from dpsynth.stream.processor import InputMessage, PartitionProcessor, Sink
from dpsynth.stream.replay import make_replay
from dpsynth.stream.settings import WorkerConfig
from dpsynth.stream.sink import KafkaSink
from dpsynth.stream.store import PartitionStore
from dpsynth.stream.ticks import MarkerKey, period_start_ms

log = logging.getLogger(__name__)

#: Exit status after a fatal processing error (the state on disk is consistent: restart).
EXIT_FATAL = 3


class Operator:
    """The worker's state outside Faust: one :class:`PartitionProcessor` per assigned partition."""

    def __init__(self, config: WorkerConfig, app: faust.App, sink: Sink) -> None:
        self.config = config
        self.app = app
        self.sink = sink
        self.metrics = Metrics()
        self.crash = CrashPoints(config.crash_at)
        self.replay = make_replay(config.bootstrap_servers(), config.input_topic)
        self.processors: dict[int, PartitionProcessor] = {}
        self.pending: dict[int, deque[EventT]] = {}
        self.lock = asyncio.Lock()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dpsynth")
        self.stream: StreamT | None = None
        self.markers = MarkerKey(config.noise_key.reveal(), config.run_id)
        self.marker_sent: dict[int, int] = {}  # partition → period of the last marker written

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    def _open(self, partition: int) -> PartitionProcessor:
        c = self.config
        store = PartitionStore(
            c.data_dir / "state" / f"p{partition}", partition=partition, run_id=c.run_id,
            chunk_bytes=c.state_chunk_bytes, block_cache_bytes=c.rocksdb_block_cache_bytes,
            write_buffer_bytes=c.rocksdb_write_buffer_bytes, sync=c.state_sync,
        )
        try:
            return PartitionProcessor(
                c, partition, store=store, sink=self.sink, metrics=self.metrics,
                crash=self.crash, replay=self.replay,
            )
        except BaseException:
            store.close()
            raise

    async def processor(self, partition: int) -> PartitionProcessor:
        """The partition's processor, loading its state on first use after an assignment."""
        proc = self.processors.get(partition)
        if proc is None:
            proc = self.processors[partition] = await self._run(self._open, partition)
            self.pending[partition] = deque()
        return proc

    async def consume(self, stream: StreamT) -> None:
        """The agent body: batches of events, never acknowledged before their commit."""
        self.stream = stream
        c = self.config
        async for events in stream.noack_take(c.batch_max_events, within=c.batch_within_s):
            await self._guard(self.handle(events))

    async def handle(self, events: list[EventT]) -> None:
        """Process one batch (all partitions), then acknowledge what the commits cover."""
        async with self.lock:
            assigned = {tp.partition for tp in self.app.consumer.assignment()
                        if tp.topic == self.config.input_topic}
            by_partition: dict[int, list[EventT]] = {}
            for event in events:
                message = event.message
                if message.partition in assigned:  # else revoked meanwhile: re-read elsewhere
                    by_partition.setdefault(message.partition, []).append(event)
            for partition, part in by_partition.items():
                proc = await self.processor(partition)
                messages = [_input_message(e) for e in part]
                self.pending[partition].extend(part)
                committed = await self._run(proc.process, messages)
                await self._ack_upto(partition, committed)

    async def checkpoint(self) -> None:
        """Commit open ticks that waited too long (an idle input partition)."""
        async with self.lock:
            for partition, proc in list(self.processors.items()):
                if proc.checkpoint_due():
                    committed = await self._run(proc.commit)
                    await self._ack_upto(partition, committed)

    def write_markers(self, now_s: float | None = None) -> None:
        """One tick marker per owned input partition and period (privacy: P11).

        The marker of the current period is written once per partition; a partition loaded
        from state whose last applied marker is older gets it at once (a restart in the
        middle of a period writes it again: the processor skips the second copy).
        """
        period = self.config.tick_seconds
        at_ms = period_start_ms(time.time() if now_s is None else now_s, period)
        for partition, proc in list(self.processors.items()):
            if at_ms <= self.marker_sent.get(partition, proc.last_tick_ms):
                continue
            self.sink.send(self.config.input_topic, b"dpsynth-tick",
                           self.markers.encode(partition, at_ms), partition=partition)
            self.marker_sent[partition] = at_ms
            self.metrics.inc("tick_markers_written", partition)

    async def tick(self) -> None:
        """The tick-marker timer's body (see :meth:`write_markers`)."""
        self.write_markers()

    async def _ack_upto(self, partition: int, committed: int) -> None:
        queue = self.pending.get(partition)
        if queue is None or self.stream is None:
            return
        while queue and queue[0].message.offset <= committed:
            await self.stream.ack(queue.popleft())

    async def assign(self, assigned: set[TP]) -> None:
        """Load the state of newly assigned partitions now (metrics show them at once)."""
        async with self.lock:
            for tp in sorted(assigned):
                if tp.topic == self.config.input_topic:
                    await self.processor(tp.partition)

    async def revoke(self, revoked: set[TP]) -> None:
        """Drop the processors of revoked partitions; their state reloads on reassignment."""
        async with self.lock:
            for tp in revoked:
                if tp.topic != self.config.input_topic:
                    continue
                proc = self.processors.pop(tp.partition, None)
                self.pending.pop(tp.partition, None)
                self.marker_sent.pop(tp.partition, None)
                if proc is not None:
                    await self._run(proc.close)
                    log.info("partition %d revoked: state closed at watermark %d",
                             tp.partition, proc.committed)

    async def _guard(self, work: Any) -> None:
        """Run ``work``; on any error log it and exit, rather than leave a silent, stuck agent."""
        try:
            await work
        except Exception as e:  # noqa: BLE001
            # messages of dpsynth errors name the fix and never a value or the key
            log.critical("fatal: %s: %s; exiting with status %d (state on disk is consistent: "
                         "fix the cause and restart)", type(e).__name__, e, EXIT_FATAL)
            logging.shutdown()
            os._exit(EXIT_FATAL)


def _input_message(event: EventT) -> InputMessage:
    message = event.message
    ts = message.timestamp
    return InputMessage(
        offset=message.offset,
        value=message.value,
        timestamp_ms=int(ts * 1000) if ts else None,
        received=message.time_in or time.monotonic(),
        key=message.key,
    )


def create_app(config: WorkerConfig, *, sink: Sink | None = None) -> tuple[faust.App, Operator]:
    """The Faust app and its :class:`Operator`, configured from ``config``."""
    session = config.session_timeout_s
    app = faust.App(
        config.app_id,
        broker=config.faust_broker(),
        autodiscover=False,
        datadir=str(config.data_dir / "faust"),
        store="memory://",
        processing_guarantee="at_least_once",
        stream_wait_empty=False,
        table_standby_replicas=0,
        topic_allow_declare=False,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        # static membership: a restarted pod takes its partitions back without a rebalance
        **({"consumer_group_instance_id": config.group_instance_id}
           if config.group_instance_id else {}),
        broker_session_timeout=session,
        broker_heartbeat_interval=max(session / 10, 0.5),
        broker_rebalance_timeout=session,
        broker_request_timeout=max(session + 10.0, 90.0),
        broker_commit_interval=1.0,
        web_enabled=True,
        web_port=config.web_port,
        web_bind=config.web_bind,
        **({"web_host": "127.0.0.1"} if config.web_bind.startswith("127.") else {}),
    )
    operator = Operator(config, app, sink or KafkaSink(config.bootstrap_servers()))
    raw_events = app.topic(
        config.input_topic, key_type=bytes, value_type=bytes,
        key_serializer="raw", value_serializer="raw",
    )

    async def synthesize(stream: StreamT) -> None:
        await operator.consume(stream)

    synthesize.__name__ = "synthesize"
    app.agent(raw_events, name="dpsynth.synthesize", concurrency=1)(synthesize)

    @app.timer(interval=max(config.checkpoint_interval_s / 2, 0.5))
    async def checkpoint() -> None:
        await operator._guard(operator.checkpoint())

    if config.tick_seconds > 0:
        @app.timer(interval=min(max(config.tick_seconds / 4, 0.05), 1.0))
        async def tick_markers() -> None:
            await operator._guard(operator.tick())

    @app.on_partitions_assigned.connect
    async def on_assigned(sender: Any, assigned: set[TP], **kwargs: Any) -> None:
        await operator._guard(operator.assign(assigned))

    @app.on_partitions_revoked.connect
    async def on_revoked(sender: Any, revoked: set[TP], **kwargs: Any) -> None:
        await operator._guard(operator.revoke(revoked))

    @app.page("/metrics")
    async def metrics(web: Any, request: Any) -> Any:
        return web.text(operator.metrics.render(), content_type="text/plain; version=0.0.4")

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        return web.text("ok\n")

    return app, operator
