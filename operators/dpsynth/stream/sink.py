"""confluent-kafka I/O of the worker: the output producer and the input-partition replay reader.

Layer: adapter. Releases and dead letters leave through librdkafka's **idempotent** producer
(``enable.idempotence``: ``acks=all``, retries never duplicate or reorder records of one
partition), not through Faust's aiokafka producer, for two reasons: :meth:`KafkaSink.flush` is a
plain barrier ("every queued record is on the broker, or an exception"), which is what the commit
protocol needs before it commits state; and per-partition order with retries is guaranteed.

:func:`make_replay` reads a range of an input partition back with a group-less consumer (manual
assignment, nothing committed): how a worker rebuilds the state of a partition it received
without local state (``docs/operator.md`` "Replay instead of changelogs").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from dpsynth.errors import DpsynthError
from dpsynth.stream.processor import InputMessage, Replay

log = logging.getLogger(__name__)


class DeliveryError(DpsynthError):
    """A release or dead-letter record could not be delivered to the broker."""


class InputLostError(DpsynthError):
    """Input records needed to rebuild a partition's state were deleted from Kafka."""


class KafkaSink:
    """Idempotent producer of release and dead-letter records (see the module docstring)."""

    def __init__(self, bootstrap_servers: str, *, client_id: str = "dpsynth-worker",
                 flush_timeout_s: float = 60.0) -> None:
        self.flush_timeout_s = flush_timeout_s
        self._errors: list[str] = []
        self._producer = Producer({
            "bootstrap.servers": bootstrap_servers,
            "client.id": client_id,
            "enable.idempotence": True,  # implies acks=all, ordered retries without duplicates
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "message.max.bytes": 1_000_000,
            "queue.buffering.max.kbytes": 262_144,
        })

    def _on_delivery(self, err: KafkaError | None, msg: object) -> None:
        if err is not None:
            self._errors.append(str(err))  # librdkafka's text: codes and topic, no payload

    def send(self, topic: str, key: bytes, value: bytes) -> None:
        """Queue one record; waits while librdkafka's queue is full."""
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=self._on_delivery)
                break
            except BufferError:
                self._producer.poll(0.05)
        self._producer.poll(0)

    def flush(self) -> None:
        """Wait until every queued record is acknowledged by the broker, or raise."""
        remaining = self._producer.flush(self.flush_timeout_s)
        if remaining or self._errors:
            errors, self._errors = self._errors[:3], []
            raise DeliveryError(
                f"{remaining} records still queued after {self.flush_timeout_s:g} s and "
                f"{len(errors)} delivery failures (first: {errors}); check the broker and the "
                "output topics (DPSYNTH_OUTPUT_TOPIC, DPSYNTH_DEAD_LETTER_TOPIC) exist"
            )

    def close(self) -> None:
        """Deliver what is queued (best effort) and drop the producer."""
        self._producer.flush(5.0)


def make_replay(bootstrap_servers: str, topic: str, *, timeout_s: float = 30.0) -> Replay:
    """A :data:`~dpsynth.stream.processor.Replay` reading ``topic`` with a group-less consumer.

    Records are read ``read_uncommitted``, exactly as the Faust worker reads them (Faust uses
    ``read_committed`` only with its exactly-once mode), so a replay sees the same records.
    """

    def replay(partition: int, start: int, end: int) -> Iterator[InputMessage]:
        consumer = Consumer({
            "bootstrap.servers": bootstrap_servers,
            "group.id": "dpsynth-replay-never-committed",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_uncommitted",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        })
        try:
            tp = TopicPartition(topic, partition)
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s)
            if start < low:
                raise InputLostError(
                    f"input {topic}[{partition}]: offsets [{start}, {low}) were deleted "
                    "(retention) before this worker counted them, so the partition's state "
                    "cannot be rebuilt. Restore the worker's DPSYNTH_DATA_DIR from a backup, or "
                    "start a new run (new DPSYNTH_RUN_ID and noise key); raise the input "
                    "topic's retention so it does not happen again"
                )
            end = min(end, high)
            if start >= end:
                return
            consumer.assign([TopicPartition(topic, partition, start)])
            deadline = time.monotonic() + timeout_s
            while True:
                messages = consumer.consume(5000, timeout=1.0)
                if not messages and time.monotonic() > deadline:
                    raise InputLostError(
                        f"input {topic}[{partition}]: replay of [{start}, {end}) stalled for "
                        f"{timeout_s:g} s; check the broker"
                    )
                for m in messages:
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            return
                        raise KafkaException(err)
                    if m.offset() >= end:
                        return
                    deadline = time.monotonic() + timeout_s
                    kind, ts = m.timestamp()
                    yield InputMessage(
                        offset=m.offset(), value=m.value(),
                        timestamp_ms=ts if kind else None, received=time.monotonic(),
                    )
                position = consumer.position([TopicPartition(topic, partition)])[0].offset
                if position >= end:
                    return
        finally:
            consumer.close()

    return replay
