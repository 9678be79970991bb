"""The per-user counts as stored: one small value per user, keyed by the user's keyed hash.

Layer: adapter (numpy only). Privacy unit "user" (docs/privacy.md P15): a user's entry is its
counted records (uint16) and, with a per-step cap, the step of its latest one (int64) and its
count in that step (uint16), little endian — 2 or 12 bytes — under the 16 bytes of its 128-bit
keyed hash (:mod:`dpsynth.bounding.ids`: the ids cannot be read back without the run's key).
The local store (:mod:`dpsynth.stream.store`) and the state topic
(:mod:`dpsynth.stream.changelog`) hold the same entries.
"""

from __future__ import annotations

import numpy as np

from dpsynth.bounding import UserCounts, UserKeys

#: Stored value of a user: its counted records; with a per-step cap also (step, step count).
COUNT = np.dtype("<u2")
STEPPED = np.dtype([("count", "<u2"), ("step", "<i8"), ("step_count", "<u2")])


def user_keys(keys: UserKeys, prefix: bytes = b"") -> list[bytes]:
    """``prefix`` + the 16 bytes of every user hash (big-endian words)."""
    raw = np.ascontiguousarray(keys, dtype=">u8").tobytes()
    return [prefix + raw[i:i + 16] for i in range(0, len(raw), 16)]


def hashes_of(raw_keys: list[bytes]) -> UserKeys:
    """The user hashes of 16-byte keys (the inverse of :func:`user_keys` without prefix)."""
    return np.frombuffer(b"".join(raw_keys), ">u8").astype(np.uint64).reshape(-1, 2)


def encode_users(users: UserCounts) -> list[tuple[bytes, bytes]]:
    """``(16-byte key, value)`` of every user in ``users``."""
    if users.steps is None:
        values, width = users.counts.astype(COUNT).tobytes(), COUNT.itemsize
    else:
        stepped = np.empty(len(users), STEPPED)
        stepped["count"], stepped["step"] = users.counts, users.steps
        stepped["step_count"] = users.step_counts
        values, width = stepped.tobytes(), STEPPED.itemsize
    keys = user_keys(users.keys)
    return [(key, values[i * width:(i + 1) * width]) for i, key in enumerate(keys)]


def decode_users(keys: UserKeys, found: list[int], raw: list[bytes]) -> UserCounts:
    """UserCounts of ``keys`` from the stored values of those at ``found`` (count 0: not
    stored); ValueError when a value has neither width."""
    counts = np.zeros(len(keys), np.uint16)
    steps = np.full(len(keys), -1, np.int64)
    step_counts = np.zeros(len(keys), np.uint16)
    if not found:
        return UserCounts(keys, counts, steps, step_counts)
    values = b"".join(raw)
    if len(values) == len(found) * COUNT.itemsize:
        counts[found] = np.frombuffer(values, COUNT)
    elif len(values) == len(found) * STEPPED.itemsize:
        stepped = np.frombuffer(values, STEPPED)
        counts[found] = stepped["count"]
        steps[found], step_counts[found] = stepped["step"], stepped["step_count"]
    else:
        raise ValueError("a stored user count has the wrong length")
    return UserCounts(keys, counts, steps, step_counts)
