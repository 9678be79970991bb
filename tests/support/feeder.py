"""Records arriving while a worker is killed and restarted: a steady producer in a thread.

Our own tests' kit (not shipped).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from dpsynth.testing.kafka import encode_records, records_of


class Feeder:
    """Sends ``points`` in order, ``per_message`` records a message, one message every
    ``pause_s``, to ``partition`` (with ``partitions`` > 1: to partitions ``partition``, … in
    turn), until exhausted or stopped (a context manager; on exit every message sent is
    delivered, or the exit raises). ``sent``: records sent so far."""

    def __init__(self, bootstrap: str, topic: str, points: np.ndarray, *, partition: int = 0,
                 partitions: int = 1, per_message: int = 10, pause_s: float = 0.02) -> None:
        from confluent_kafka import Producer

        self.topic, self.points, self.partition = topic, points, partition
        self.partitions = partitions
        self.per_message, self.pause_s = per_message, pause_s
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "linger.ms": 0})
        self.errors: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set() and self.sent < len(self.points):
            batch = self.points[self.sent:self.sent + self.per_message]
            turn = (self.sent // self.per_message) % self.partitions
            self.producer.produce(self.topic, encode_records(records_of(batch)),
                                  partition=self.partition + turn, on_delivery=self._delivered)
            self.producer.poll(0)
            self.sent += len(batch)
            time.sleep(self.pause_s)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))

    @property
    def done(self) -> bool:
        """Every point sent."""
        return self.sent == len(self.points)

    def __enter__(self) -> Feeder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join(60)
        if self.producer.flush(60) or self.errors:
            raise RuntimeError(f"records to {self.topic} not delivered: {self.errors[:3]}")
