"""Users to partitions: every record of a user reaches the one partition that owns it (P14).

Layer: adapter. Under the privacy unit "user" each partition's synthesizer counts at most k
records per user; a user whose records reached two partitions could contribute 2k. So the
input must be **keyed by user id** and partitioned by Kafka's default partitioner for keyed
records — ``toPositive(murmur2(key bytes)) mod partitions``, as the Java client does and
librdkafka's ``partitioner=murmur2_random`` — and the worker checks every message: its key must
hash to the worker's own partition (and, if the schema declares a user column, every record's
id must equal the key). A message that fails is dead-lettered with the reason, never the value.
The partition count is bound to the run's state: adding partitions to a running input topic
would move users between partitions (the messages of a moved user are dead-lettered).
Tick markers (:mod:`dpsynth.stream.ticks`) are handled before this check and always pass.

>>> [murmur2(s.encode()) for s in ("21", "foobar", "abc")]
[-973932308, -790332482, 479470107]
>>> partition_of(b"21", 8)
4
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsynth.bounding import split_user_records
from dpsynth.schema import ClipReport, Schema
from dpsynth.stream.codecs import BatchResult, split_messages

_M32 = 0xFFFFFFFF
_M = 0x5BD1E995


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data`` (seed 0x9747b28c), as a signed int like Java's."""
    length = len(data)
    h = (0x9747B28C ^ length) & _M32
    body = length & ~3
    for i in range(0, body, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _M32
        k ^= k >> 24
        k = (k * _M) & _M32
        h = ((h * _M) & _M32) ^ k
    tail = length & 3
    if tail:
        h ^= int.from_bytes(data[body:], "little")
        h = (h * _M) & _M32
    h ^= h >> 13
    h = (h * _M) & _M32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_of(key: bytes, partitions: int) -> int:
    """The partition of a keyed record under Kafka's default partitioner."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class UserRouting:
    """The per-message check of the privacy unit "user" in the worker (module docstring).

    Parameters
    ----------
    partition, partitions
        This worker's input partition and the input topic's partition count.
    column
        The schema's user id column, or None when the message key alone is the id.
    """

    def __init__(self, partition: int, partitions: int, column: str | None) -> None:
        self.partition = int(partition)
        self.partitions = int(partitions)
        self.column = column

    def refusal(self, key: bytes | None) -> str | None:
        """Why a message with this key may not be counted here (None: it may)."""
        if key is None:
            return ("message has no key: under the privacy unit 'user' the key must be the "
                    "record's user id (produce keyed by user id with Kafka's default "
                    "partitioner)")
        owner = partition_of(key, self.partitions)
        if owner != self.partition:
            return (f"message key hashes to partition {owner} of {self.partitions}, not "
                    f"{self.partition}, under Kafka's default partitioner (murmur2): produce "
                    "keyed by user id with the default partitioner (librdkafka: "
                    "partitioner=murmur2_random), and never add partitions to the input topic "
                    "of a running privacy-unit-user run")
        return None

    def split(self, schema: Schema, values: Sequence[bytes | None],
              keys: Sequence[bytes | None]) -> BatchResult:
        """Decode and check the messages; ``users`` of the result: the key of each valid row."""
        refused = [self.refusal(key) for key in keys]
        column = self.column

        def check(records: list[Any], owner: list[int]
                  ) -> tuple[np.ndarray, ClipReport, list[tuple[int, str]]]:
            if not records:
                return np.zeros((0, schema.d)), ClipReport(schema.names, (0,) * schema.d), []
            if column is None:
                return schema.split_valid(records)
            points, clips, bad, ids = split_user_records(schema, records)
            rejected = {i for i, _ in bad}
            valid = [i for i in range(len(records)) if i not in rejected]
            keep = np.array([ids[j] == keys[owner[i]] for j, i in enumerate(valid)], bool)
            mismatch = f"user id field {column!r} must equal the message key"
            bad = sorted(bad + [(i, mismatch) for i, ok in zip(valid, keep, strict=True)
                                if not ok])  # privacy: P14 (one user per key, one partition)
            return points[keep] if len(keep) else points, clips, bad

        batch = split_messages(values, check, refused)
        owners = np.repeat(np.arange(len(values)), batch.valid_per_message)
        batch.users = [keys[m] for m in owners.tolist()]  # type: ignore[misc]
        return batch
