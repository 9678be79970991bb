"""Topics to recordings and back: ``dpsynth topics export`` and ``dpsynth topics import``.

Layer: adapter (confluent-kafka). :func:`read_topic_records` reads every partition of a topic up
to its end at the start of the read (``read_committed``) and merges the partitions by timestamp
— each partition's order kept, ties broken by partition number — so the file order depends only
on what the topic holds, never on how fetches interleaved: export → import → export gives the
same lines (offsets aside). :func:`export_topic` writes them to a recording
(:mod:`~dpsynth.client.recording`); :func:`import_recording` writes a recording into a topic
of any broker with an idempotent producer (per-partition order kept across retries), each
record to its recorded partition with its key, value, headers and timestamp (as recorded,
re-stamped now, or shifted to now), optionally paced at the recorded rate.

.. code-block:: python

    export_topic("127.0.0.1:9092", "dpsynth-synthetic", "synthetic.ndjson.gz")
    import_recording("127.0.0.1:9093", "synthetic.ndjson.gz", topic="replayed")
"""

from __future__ import annotations

import heapq
import itertools
import os
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import IO, Any

from dpsynth.client.content import VALUES, describe
from dpsynth.client.recording import (
    RecordingHeader,
    RecordingReader,
    RecordingWriter,
    TopicRecord,
)
from dpsynth.client.topic_admin import TopicError, ensure_topic, kafka_module, topic_partitions

#: confluent-kafka's timestamp type codes (NOT_AVAILABLE, CREATE_TIME, LOG_APPEND_TIME).
_TIMESTAMP_NAMES = {0: "NoTimestampType", 1: "CreateTime", 2: "LogAppendTime"}
#: Records looked at to tell a topic's role and run before the header is written.
DESCRIBE_RECORDS = 1000
#: Records buffered per partition before its fetching is paused (bounds export memory).
_BUFFER_RECORDS = 50_000
#: How re-stamped imports set timestamps.
TIMESTAMP_MODES = ("recorded", "now", "shift")
#: Records the import's producer may hold unacknowledged.
_QUEUE_RECORDS = 1_000_000
Progress = Callable[[int], None]


@dataclass(frozen=True)
class TransferSummary:
    """What an export or import moved: records per partition, the topic, seconds taken, and
    (imports) the oldest timestamp written, to compare with the topic's retention."""

    topic: str
    header: RecordingHeader
    per_partition: dict[int, int]
    seconds: float
    oldest_ms: int | None = None

    @property
    def records(self) -> int:
        """Records moved in all."""
        return sum(self.per_partition.values())


# -- reading a topic ----------------------------------------------------------------------------


def _record(message: Any) -> TopicRecord:
    kind, timestamp = message.timestamp()
    headers = message.headers()
    return TopicRecord(message.partition(), message.offset(), message.key(), message.value(),
                       timestamp, _TIMESTAMP_NAMES.get(kind, "NoTimestampType"),
                       tuple(headers) if headers else ())


def read_topic_records(bootstrap: str, topic: str, *, timeout_s: float = 60.0,
                       config: Mapping[str, Any] | None = None) -> Iterator[TopicRecord]:
    """Every record of ``topic`` up to the end of each partition when the read starts.

    Partitions are merged by timestamp (each kept in order; ties by partition), so the order
    is a function of the topic's content. ``read_committed``: aborted records are skipped.
    ``timeout_s`` bounds a wait without any new record.
    """
    kafka = kafka_module()
    consumer = kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"dpsynth-export-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False, "isolation.level": "read_committed",
        "enable.partition.eof": True, "auto.offset.reset": "earliest", **(config or {})})
    try:
        ends = _end_offsets(consumer, kafka, bootstrap, topic, timeout_s)
        consumer.assign([kafka.TopicPartition(topic, p, low) for p, (low, _) in ends.items()])
        yield from _merged(consumer, kafka, topic, ends, timeout_s)
    finally:
        consumer.close()


def _end_offsets(consumer: Any, kafka: Any, bootstrap: str, topic: str,
                 timeout_s: float) -> dict[int, tuple[int, int]]:
    """partition → (low, high) watermarks of the partitions holding records."""
    try:
        found = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    except kafka.KafkaException as e:
        raise TopicError(f"cannot reach the broker at {bootstrap} ({e})") from None
    if found is None or found.error is not None or not found.partitions:
        raise TopicError(f"topic {topic!r} does not exist on {bootstrap}: check the name "
                         "(--topic) and the broker (--bootstrap)")
    out = {}
    for p in sorted(found.partitions):
        low, high = consumer.get_watermark_offsets(kafka.TopicPartition(topic, p),
                                                   timeout=timeout_s)
        if high > low:
            out[p] = (low, high)
    return out


def _merged(consumer: Any, kafka: Any, topic: str, ends: dict[int, tuple[int, int]],
            timeout_s: float) -> Iterator[TopicRecord]:
    """Merge the partitions' records by (timestamp, partition): a partition's head is emitted
    only once every partition still being read has one, so the result never depends on how
    the fetches interleaved."""
    buffers: dict[int, deque[TopicRecord]] = {p: deque() for p in ends}
    reading, paused = set(ends), set()
    heads: list[tuple[int, int]] = []  # (timestamp, partition) of each non-empty buffer's head
    last = time.monotonic()
    while reading or heads:
        while heads and all(buffers[p] for p in reading):
            _, p = heapq.heappop(heads)
            buffer = buffers[p]
            yield buffer.popleft()
            if buffer:
                heapq.heappush(heads, (buffer[0].timestamp, p))
            if p in paused and len(buffer) < _BUFFER_RECORDS // 2:
                consumer.resume([kafka.TopicPartition(topic, p)])
                paused.discard(p)
        if not reading:
            continue
        messages = consumer.consume(10_000, timeout=0.2)
        if messages:
            last = time.monotonic()
        elif time.monotonic() - last > timeout_s:
            raise TopicError(f"reading {topic!r} stalled: no record for {timeout_s:g} s from "
                             f"partitions {sorted(reading)}")
        for message in messages:
            p, error = message.partition(), message.error()
            if error is not None:
                if error.code() == kafka.KafkaError._PARTITION_EOF:
                    reading.discard(p)
                    continue
                raise TopicError(f"reading {topic!r} partition {p}: {error}")
            if p not in reading:
                continue
            buffer = buffers[p]
            if not buffer:
                heapq.heappush(heads, (message.timestamp()[1], p))
            buffer.append(_record(message))
            if message.offset() + 1 >= ends[p][1]:
                reading.discard(p)
            elif len(buffer) >= _BUFFER_RECORDS and p not in paused:
                consumer.pause([kafka.TopicPartition(topic, p)])
                paused.add(p)


# -- export -------------------------------------------------------------------------------------


def export_topic(
    bootstrap: str, topic: str, target: str | os.PathLike[str] | IO[bytes], *,
    role: str = "auto", run_id: str | None = None,
    record_schema: Mapping[str, Any] | None = None, note: str | None = None,
    timeout_s: float = 60.0, compresslevel: int = 6, progress: Progress | None = None,
) -> TransferSummary:
    """Record every record of ``topic`` (as :func:`read_topic_records`) into ``target``.

    The header is written after the first :data:`DESCRIBE_RECORDS` records have been read, so
    that it can name the topic's role, run id and release parameters (``role="auto"``); what
    is given (``role``, ``run_id``) wins. ``progress`` is called with records written so far.
    """
    started = time.perf_counter()
    partitions = topic_partitions(bootstrap, topic)
    if partitions is None:
        raise TopicError(f"topic {topic!r} does not exist on {bootstrap}: check the name "
                         "(--topic) and the broker (--bootstrap)")
    records = read_topic_records(bootstrap, topic, timeout_s=timeout_s)
    first = list(itertools.islice(records, DESCRIBE_RECORDS))
    content = describe((r.value for r in first), role=role, run_id=run_id)
    header = RecordingHeader(
        topic=topic, partitions=partitions, role=content.role, run_id=content.run_id,
        values=VALUES[content.role], release=content.release, record_schema=record_schema,
        note=note, sensitive=content.role != "synthetic")
    with RecordingWriter(target, header, compresslevel=compresslevel) as writer:
        for n, record in enumerate(itertools.chain(first, records), start=1):
            writer.write(record)
            if progress is not None and n % 10_000 == 0:
                progress(n)
    if progress is not None:
        progress(sum(writer.counts.values()))
    return TransferSummary(topic, header, dict(writer.counts), time.perf_counter() - started)


# -- import -------------------------------------------------------------------------------------


class PaceClock:
    """The clocks of an import: wall time for re-stamping, monotonic time for pacing.

    The default is the system's; a test injects its own (e.g. one whose :meth:`wait_until`
    records the due times and jumps there) to check the pacing without waiting.
    """

    def wall(self) -> float:
        """Seconds since the epoch (re-stamped timestamps)."""
        return time.time()

    def monotonic(self) -> float:
        """Seconds of a monotonic clock (the pace's origin)."""
        return time.monotonic()

    def wait_until(self, due: float, poll: Callable[[float], Any]) -> None:
        """Serve the producer's delivery reports (``poll``) until monotonic time ``due``."""
        while (left := due - time.monotonic()) > 0:
            poll(min(left, 0.1))


def import_recording(
    bootstrap: str, source: str | os.PathLike[str] | IO[bytes], *, topic: str | None = None,
    timestamps: str = "recorded", speed: float | None = None, create: bool = True,
    replication_factor: int = -1, topic_config: Mapping[str, str] | None = None,
    config: Mapping[str, Any] | None = None, progress: Progress | None = None,
    clock: PaceClock | None = None,
) -> TransferSummary:
    """Write the records of a recording into ``topic`` (default: the recorded topic's name).

    Each record goes to its recorded partition, in file order, with its key, value and
    headers. ``timestamps``: ``"recorded"`` (as CreateTime, whatever the recorded type),
    ``"now"`` (stamped by the producer when sent) or ``"shift"`` (recorded times moved so the
    first record is now). ``speed``: pace the records at ``speed`` times the recorded rate
    (1.0: as recorded; None: as fast as the broker takes them). A missing topic is created
    with the recording's partition count (``create``); one with fewer partitions is refused.
    """
    if timestamps not in TIMESTAMP_MODES:
        raise TopicError(f"timestamps ({timestamps!r}) must be one of "
                         f"{', '.join(TIMESTAMP_MODES)}")
    if speed is not None and not speed > 0:
        raise TopicError(f"speed ({speed!r}) must be > 0 (1.0: the recorded rate)")
    kafka = kafka_module()
    started = time.perf_counter()
    with RecordingReader(source) as reader:
        header = reader.header
        target = topic or header.topic
        n_partitions = ensure_topic(bootstrap, target, header.partitions,
                                    replication_factor=replication_factor, create=create,
                                    topic_config=topic_config)
        settings = {
            "bootstrap.servers": bootstrap, "client.id": "dpsynth-topics-import",
            "enable.idempotence": True,  # acks=all; retries never reorder or duplicate
            "linger.ms": 5 if speed else 50, "batch.size": 1_000_000,
            "queue.buffering.max.messages": _QUEUE_RECORDS,
            "queue.buffering.max.kbytes": 1_048_576, **(config or {})}
        failures: list[str] = []
        producer = kafka.Producer({**settings, "delivery.report.only.error": True,
                                   "on_delivery": lambda err, _msg: failures.append(str(err))})
        try:
            oldest = _produce_all(producer, reader, target, n_partitions, timestamps, speed,
                                  failures, progress, clock or PaceClock())
        finally:  # what was sent before an error is delivered, not dropped half-way
            remaining = producer.flush(120)
    if remaining or failures:
        raise TopicError(f"{remaining} records undelivered after 120 s and {len(failures)} "
                         f"delivery failures (first: {failures[:3]}) writing {target!r}")
    return TransferSummary(target, replace(header, topic=target), dict(reader.counts),
                           time.perf_counter() - started, oldest)


def _produce_all(producer: Any, reader: RecordingReader, topic: str, n_partitions: int,
                 timestamps: str, speed: float | None, failures: list[str],
                 progress: Progress | None, pace: PaceClock) -> int | None:
    """The import loop: every record of ``reader`` to ``producer``, paced when asked; returns
    the oldest timestamp written (None: none set, the producer stamped them).

    The producer reports failed deliveries only (``delivery.report.only.error``), so the loop
    costs one ``produce`` per record and nothing per acknowledgement.
    """
    produce, poll, kafka_error = producer.produce, producer.poll, kafka_module().KafkaException
    start: tuple[float, int] | None = None  # (monotonic start, first recorded timestamp)
    shift, stamp_now, n = 0, timestamps == "now", 0
    oldest: int | None = None
    for batch in reader.batches():
        if batch and start is None:
            start = (pace.monotonic(), batch[0].timestamp)
            shift = int(pace.wall() * 1000) - start[1] if timestamps == "shift" else 0
        top = max((r.partition for r in batch), default=0)
        if top >= n_partitions:
            raise TopicError(f"a record of partition {top} does not fit topic {topic!r} "
                             f"({n_partitions} partitions): the recording's header "
                             "understates its partitions; import into a topic with more "
                             f"than {top} partitions")
        if not stamp_now and batch:
            low = min((r.timestamp for r in batch if r.timestamp >= 0), default=None)
            if low is not None:
                oldest = low + shift if oldest is None else min(oldest, low + shift)
        for partition, offset, key, value, stamp, _, headers in batch:
            if speed is not None and start is not None:
                pace.wait_until(start[0] + (stamp - start[1]) / 1000 / speed, poll)
            at = 0 if stamp_now or stamp < 0 else stamp + shift
            try:
                produce(topic, value, key, partition, timestamp=at,
                        headers=list(headers) if headers else None)
            except BufferError:  # the local queue is full: serve reports, then retry once
                while len(producer) >= _QUEUE_RECORDS // 2:
                    poll(0.05)
                produce(topic, value, key, partition, timestamp=at,
                        headers=list(headers) if headers else None)
            except kafka_error as e:  # refused by the client, e.g. a record above its limit
                raise TopicError(
                    f"the record recorded at {partition}/{offset} cannot be written to "
                    f"{topic!r} ({e.args[0].str() if e.args else e}); a record larger than "
                    "1 MB needs a topic created with a larger max.message.bytes and the "
                    "client setting message.max.bytes (import_recording(config=...))"
                ) from None
        poll(0)
        n += len(batch)
        if failures:
            break
        if progress is not None:
            progress(n)
    return oldest
