"""User ids as 128-bit keyed hashes: the identity of a privacy unit, unreadable without the key.

Layer: core. A user id is a declared column of the records (or, in the worker, the Kafka
message key); it is never inferred from values. Its *canonical bytes* are the UTF-8 text of a
string, the decimal text of an integer, or the bytes themselves, so ``"42"``, ``42`` and
``b"42"`` are one user whether they come from a CSV file, msgpack or a message key. The id is
then replaced by two SipHash-2-4 values (Aumasson–Bernstein 2012, a pseudorandom function of
128-bit key) under two independent subkeys of the run's key: 128 bits per user, which is all the
contribution bounds ever store, so the state does not reveal ids to anyone without the key.

Collisions (privacy: P15): the low bit of the second word is set (0 marks an empty slot of the
bounds' table), leaving 127 bits, so two users of one partition share a hash with probability
at most N²·2^-128 for N users (a random function under the PRF assumption); only then could one
user's records use another's quota. docs/privacy.md P15 turns that into the δ of the guarantee.

>>> canonical_id("ab"), canonical_id(42), canonical_id(b"42"), canonical_id(1.5)
(b'ab', b'42', b'42', None)
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from dpsynth.noise import KeyedNoise

#: (n, 2) uint64: the two 64-bit SipHash values of each user id.
UserKeys = NDArray[np.uint64]
#: Longest canonical id accepted (bytes); a longer one is rejected with a reason.
MAX_ID_BYTES = 1024
#: Context of the subkey that keys the id hash (never used for noise).
HASH_CONTEXT = ("dpsynth", "user-id", "siphash-2-4", "v1")
_INVALID = "must be a string or an integer (the declared user id)"
U64 = np.uint64
_Int = int | np.int64  # an index: a Python int, or an element of an int64 array in a kernel


def canonical_id(value: Any) -> bytes | None:
    """The canonical bytes of a user id, or None when it is not a valid id.

    Strings (UTF-8), integers (decimal; not booleans) and bytes are ids; anything else — a
    float, None, a list — is not, and neither is one longer than :data:`MAX_ID_BYTES`.
    """
    if isinstance(value, bytes | bytearray):
        raw = bytes(value)
    elif isinstance(value, str):
        try:
            raw = value.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates
            return None
    elif isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_):
        raw = str(int(value)).encode()
    else:
        return None
    return raw if len(raw) <= MAX_ID_BYTES else None


def id_reason(field: str) -> str:
    """The dead-letter reason of an invalid id in ``field`` (the rule, never the value)."""
    return (f"user id field {field!r} {_INVALID}, at most {MAX_ID_BYTES} bytes")


def canonical_ids(values: Sequence[Any]) -> list[bytes]:
    """Canonical bytes of every id; ValueError naming the first invalid position."""
    if all(type(v) is bytes for v in values):  # message keys
        if not values or max(map(len, values)) <= MAX_ID_BYTES:
            return list(values)
    elif all(type(v) is str for v in values):  # the common case, at C speed
        try:
            out = [v.encode() for v in values]
        except UnicodeEncodeError:
            out = []
        if out and max(map(len, out)) <= MAX_ID_BYTES:
            return out
    out = []
    for i, value in enumerate(values):
        raw = canonical_id(value)
        if raw is None:
            raise ValueError(f"user id {i} {_INVALID}, at most {MAX_ID_BYTES} bytes")
        out.append(raw)
    return out


class UserHasher:
    """Keyed 128-bit hashes of user ids (two SipHash-2-4 under subkeys of the run's key).

    >>> hasher = UserHasher(KeyedNoise(bytes(32)))
    >>> keys = hasher.hash([b"alice", b"bob", b"alice"])
    >>> keys.shape, bool((keys[0] == keys[2]).all()), bool((keys[0] == keys[1]).all())
    ((3, 2), True, False)
    """

    __slots__ = ("_keys",)

    def __init__(self, noise: KeyedNoise) -> None:
        words = noise.subkey(HASH_CONTEXT)  # 8 × 32-bit words of HMAC-SHA256(key, context)
        self._keys = words[0::2] | (words[1::2] << np.uint64(32))  # k0, k1 | k0', k1'

    def __repr__(self) -> str:
        return "UserHasher(key=<redacted>)"

    def hash_ids(self, values: Sequence[Any] | np.ndarray) -> UserKeys:
        """Keyed hashes of user ids of any accepted type (:func:`canonical_id`); an integer
        array is hashed in one compiled pass over its decimal digits (the same bytes)."""
        if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
            out = np.empty((len(values), 2), np.uint64)
            ints = values.astype(np.int64) if values.dtype.kind == "i" else values
            _hash_ints(ints, values.dtype.kind == "i", self._keys, out)
            out[:, 1] |= np.uint64(1)
            return out
        return self.hash(canonical_ids(list(values)))

    def hash(self, ids: Sequence[bytes]) -> UserKeys:
        """(n, 2) uint64 keyed hashes of canonical ids (:func:`canonical_id`)."""
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
        offsets = np.zeros(len(ids) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        buffer = np.frombuffer(b"".join(ids), np.uint8) if len(ids) else np.zeros(0, np.uint8)
        out = np.empty((len(ids), 2), np.uint64)
        _hash_many(buffer, offsets, self._keys, out)
        out[:, 1] |= np.uint64(1)  # never 0: the bounds' table marks empty slots with 0
        return out


def siphash24(data: bytes, key: bytes) -> int:
    """SipHash-2-4 of ``data`` under a 16-byte key (the reference test vectors' interface)."""
    k = np.frombuffer(key, "<u8").copy()
    return int(_siphash(np.frombuffer(data, np.uint8), 0, len(data), k[0], k[1]))


@njit(cache=True, inline="always")
def _rotl(x: U64, b: int) -> U64:
    return (x << np.uint64(b)) | (x >> np.uint64(64 - b))


@njit(cache=True, inline="always")
def _sipround(v0: U64, v1: U64, v2: U64, v3: U64) -> tuple[U64, U64, U64, U64]:
    v0 += v1
    v1 = _rotl(v1, 13) ^ v0
    v0 = _rotl(v0, 32)
    v2 += v3
    v3 = _rotl(v3, 16) ^ v2
    v0 += v3
    v3 = _rotl(v3, 21) ^ v0
    v2 += v1
    v1 = _rotl(v1, 17) ^ v2
    v2 = _rotl(v2, 32)
    return v0, v1, v2, v3


@njit(cache=True)
def _siphash(buf: NDArray[np.uint8], start: _Int, end: _Int, k0: U64, k1: U64) -> U64:
    """SipHash-2-4 (c = 2 compression, d = 4 finalisation rounds) of buf[start:end]."""
    v0 = k0 ^ np.uint64(0x736F6D6570736575)
    v1 = k1 ^ np.uint64(0x646F72616E646F6D)
    v2 = k0 ^ np.uint64(0x6C7967656E657261)
    v3 = k1 ^ np.uint64(0x7465646279746573)
    n = end - start
    full = start + (n // 8) * 8
    for p in range(start, full, 8):
        m = np.uint64(0)
        for j in range(8):  # little-endian word
            m |= np.uint64(buf[p + j]) << np.uint64(8 * j)
        v3 ^= m
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        v0 ^= m
    last = np.uint64(n & 0xFF) << np.uint64(56)
    for j in range(end - full):
        last |= np.uint64(buf[full + j]) << np.uint64(8 * j)
    v3 ^= last
    v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    v0 ^= last
    v2 ^= np.uint64(0xFF)
    for _ in range(4):
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    return v0 ^ v1 ^ v2 ^ v3


@njit(cache=True)
def _hash_many(buf: NDArray[np.uint8], offsets: NDArray[np.int64], keys: NDArray[np.uint64],
               out: UserKeys) -> None:
    for i in range(out.shape[0]):
        out[i, 0] = _siphash(buf, offsets[i], offsets[i + 1], keys[0], keys[1])
        out[i, 1] = _siphash(buf, offsets[i], offsets[i + 1], keys[2], keys[3])


@njit(cache=True)
def _hash_ints(values: NDArray[np.int64] | NDArray[np.uint64], signed: bool,
               keys: NDArray[np.uint64], out: UserKeys) -> None:
    """:func:`_hash_many` of the decimal text of each integer (``str(int(v)).encode()``)."""
    digits = np.empty(21, np.uint8)
    for i in range(values.shape[0]):
        v = values[i]
        negative = signed and v < 0
        u = np.uint64(-(v + 1)) + np.uint64(1) if negative else np.uint64(v)
        end = 21
        while True:
            end -= 1
            digits[end] = np.uint8(48 + u % np.uint64(10))
            u //= np.uint64(10)
            if u == 0:
                break
        if negative:
            end -= 1
            digits[end] = np.uint8(45)  # "-"
        out[i, 0] = _siphash(digits, end, 21, keys[0], keys[1])
        out[i, 1] = _siphash(digits, end, 21, keys[2], keys[3])
