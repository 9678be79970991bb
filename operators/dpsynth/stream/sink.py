"""The worker's output: releases and dead letters through confluent-kafka's idempotent producer.

Layer: adapter. Releases and dead letters leave through librdkafka's **idempotent** producer
(``enable.idempotence``: ``acks=all``, retries never duplicate or reorder records of one
partition), not through Faust's aiokafka producer, for two reasons: :meth:`KafkaSink.flush` is a
plain barrier ("every queued record is on the broker, or an exception"), which is what the commit
protocol needs before it commits state; and per-partition order with retries is guaranteed.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError, Producer

from dpsynth.errors import DpsynthError

log = logging.getLogger(__name__)


class DeliveryError(DpsynthError):
    """A release or dead-letter record could not be delivered to the broker."""


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
            # A release is a whole dataset (≈ 1 MB at t = 10⁶, mostly small int64 counts):
            # lz4 batches cut the bytes the broker writes and acknowledges ≈ 3× (records/s of
            # the batched path, docs/benchmarks.md §15). Transparent to every consumer: the
            # release records' bytes are unchanged (checksums, golden hashes).
            "compression.type": "lz4",
        })

    def _on_delivery(self, err: KafkaError | None, msg: object) -> None:
        if err is not None:
            self._errors.append(str(err))  # librdkafka's text: codes and topic, no payload

    def send(self, topic: str, key: bytes, value: bytes, partition: int | None = None) -> None:
        """Queue one record (to ``partition``, or by key); waits while the queue is full."""
        where: dict[str, Any] = {} if partition is None else {"partition": partition}
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=self._on_delivery,
                                       **where)
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
