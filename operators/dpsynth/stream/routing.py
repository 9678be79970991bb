"""Users to partitions: every record of a user reaches the one partition that owns it (P15).

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
from numba import njit
from numpy.typing import NDArray

from dpsynth.bounding import split_user_records
from dpsynth.schema import ClipReport, Schema
from dpsynth.stream.codecs import BatchResult, split_messages
from dpsynth.stream.settings import WorkerConfig

_M32 = 0xFFFFFFFF
_M = 0x5BD1E995
_NO_KEY = ("message has no key: under the privacy unit 'user' the key must be the record's "
           "user id (produce keyed by user id with Kafka's default partitioner)")


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


def user_bound_config(config: WorkerConfig) -> dict[str, Any]:
    """What a partition's state is bound to under the privacy unit "user" (nothing for the
    unit "record", so record-level states load as before): k, the per-step cap, and the input
    topic's partition count, which decides every user's partition."""
    if config.privacy_unit != "user":
        return {}
    return {"privacy_unit": "user", "max_contributions": config.max_contributions,
            "max_contributions_per_step": config.max_contributions_per_step,
            "input_partitions": config.input_partitions}


def partition_of(key: bytes, partitions: int) -> int:
    """The partition of a keyed record under Kafka's default partitioner."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def partitions_of(keys: Sequence[bytes], partitions: int) -> np.ndarray:
    """:func:`partition_of` of many keys in one compiled pass (int64 array)."""
    offsets = np.zeros(len(keys) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, keys), np.int64, len(keys)), out=offsets[1:])
    buffer = np.frombuffer(b"".join(keys), np.uint8) if keys else np.zeros(0, np.uint8)
    out = np.empty(len(keys), np.int64)
    _murmur2_many(buffer, offsets, out)
    return (out & 0x7FFFFFFF) % partitions


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

    def refusals(self, keys: Sequence[bytes | None]) -> list[str | None]:
        """Why each message may not be counted here (None: it may)."""
        keyed = [i for i, key in enumerate(keys) if key is not None]
        owners = partitions_of([key for key in keys if key is not None], self.partitions)
        out: list[str | None] = [_NO_KEY] * len(keys)
        for i, owner in zip(keyed, owners.tolist(), strict=True):
            out[i] = None if owner == self.partition else (
                f"message key hashes to partition {owner} of {self.partitions}, not "
                f"{self.partition}, under Kafka's default partitioner (murmur2): produce "
                "keyed by user id with the default partitioner (librdkafka: "
                "partitioner=murmur2_random), and never add partitions to the input topic "
                "of a running privacy-unit-user run")
        return out

    def split(self, schema: Schema, values: Sequence[bytes | None],
              keys: Sequence[bytes | None]) -> BatchResult:
        """Decode and check the messages; ``users`` of the result: the key of each valid row."""
        refused = self.refusals(keys)
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
                                if not ok])  # privacy: P15 (one user per key, one partition)
            return points[keep] if len(keep) else points, clips, bad

        batch = split_messages(values, check, refused)
        owners = np.repeat(np.arange(len(values)), batch.valid_per_message)
        # rows come only from messages with a key (refusals() refused the others): bytes
        batch.users = [keys[m] for m in owners.tolist()]  # type: ignore[misc]
        return batch


@njit(cache=True)
def _murmur2_many(buf: NDArray[np.uint8], offsets: NDArray[np.int64],
                  out: NDArray[np.int64]) -> None:
    """:func:`murmur2` of buf[offsets[i]:offsets[i+1]] for every i (32-bit words in uint64)."""
    m32 = np.uint64(0xFFFFFFFF)
    m = np.uint64(0x5BD1E995)
    for i in range(out.size):
        start, end = offsets[i], offsets[i + 1]
        length = end - start
        h = (np.uint64(0x9747B28C) ^ np.uint64(length)) & m32
        body = start + (length & ~3)
        for p in range(start, body, 4):
            k = (np.uint64(buf[p]) | (np.uint64(buf[p + 1]) << np.uint64(8))
                 | (np.uint64(buf[p + 2]) << np.uint64(16))
                 | (np.uint64(buf[p + 3]) << np.uint64(24)))
            k = (k * m) & m32
            k ^= k >> np.uint64(24)
            k = (k * m) & m32
            h = ((h * m) & m32) ^ k
        if end > body:
            tail = np.uint64(0)
            for j in range(end - body):
                tail |= np.uint64(buf[body + j]) << np.uint64(8 * j)
            h = ((h ^ tail) * m) & m32
        h ^= h >> np.uint64(13)
        h = (h * m) & m32
        h ^= h >> np.uint64(15)
        out[i] = np.int64(h)
