"""Compiled kernels behind :mod:`dpsynth.noise`: ChaCha20 blocks and exact integer samplers.

Layer: core (private). Nothing here holds a key for longer than one call; callers pass the
per-context subkey as 8 32-bit words. Every sample is addressed by ``(stream, event)``: the
ChaCha20 nonce is the 64-bit ``stream`` and the 64-bit block counter is ``event << 8 | block``,
so a sample may use up to 256 blocks (4096 words) of its own keystream and no two samples ever
share a word. Numbers are kept in uint64 throughout because numba turns uint64-with-int64
arithmetic into floats.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from dpsynth._types import Counts

U64 = np.uint64
Words = NDArray[np.uint64]
#: (next word of the buffer, block within the sample, stream, event), see below
Cursor = tuple[U64, U64, U64, U64]

_M32 = np.uint64(0xFFFFFFFF)
_S7, _S8, _S12, _S16, _S20, _S24, _S25 = (np.uint64(v) for v in (7, 8, 12, 16, 20, 24, 25))
_S32 = np.uint64(32)
_S11 = np.uint64(11)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)
_BLOCKS_PER_SAMPLE = np.uint64(256)
_SIGMA = (
    np.uint64(0x61707865),
    np.uint64(0x3320646E),
    np.uint64(0x79622D32),
    np.uint64(0x6B206574),
)


@njit(inline="always", cache=True)
def _quarter(a: U64, b: U64, c: U64, d: U64) -> tuple[U64, U64, U64, U64]:
    a = (a + b) & _M32
    d ^= a
    d = ((d << _S16) | (d >> _S16)) & _M32
    c = (c + d) & _M32
    b ^= c
    b = ((b << _S12) | (b >> _S20)) & _M32
    a = (a + b) & _M32
    d ^= a
    d = ((d << _S8) | (d >> _S24)) & _M32
    c = (c + d) & _M32
    b ^= c
    b = ((b << _S7) | (b >> _S25)) & _M32
    return a, b, c, d


@njit(cache=True)
def chacha20_block(key: Words, counter: U64, nonce: U64, out: Words) -> None:
    """One ChaCha20 block (D. J. Bernstein's layout: 64-bit counter, 64-bit nonce) into ``out``.

    ``key`` holds 8 little-endian 32-bit words; ``out`` receives 16 32-bit words (as uint64).
    Equal to RFC 8439's block function with nonce bytes ``counter_hi || nonce`` (tested).
    """
    j0, j1, j2, j3 = _SIGMA
    j4, j5, j6, j7 = key[0], key[1], key[2], key[3]
    j8, j9, j10, j11 = key[4], key[5], key[6], key[7]
    j12 = counter & _M32
    j13 = counter >> _S32
    j14 = nonce & _M32
    j15 = nonce >> _S32
    x0, x1, x2, x3, x4, x5, x6, x7 = j0, j1, j2, j3, j4, j5, j6, j7
    x8, x9, x10, x11, x12, x13, x14, x15 = j8, j9, j10, j11, j12, j13, j14, j15
    for _ in range(10):
        x0, x4, x8, x12 = _quarter(x0, x4, x8, x12)
        x1, x5, x9, x13 = _quarter(x1, x5, x9, x13)
        x2, x6, x10, x14 = _quarter(x2, x6, x10, x14)
        x3, x7, x11, x15 = _quarter(x3, x7, x11, x15)
        x0, x5, x10, x15 = _quarter(x0, x5, x10, x15)
        x1, x6, x11, x12 = _quarter(x1, x6, x11, x12)
        x2, x7, x8, x13 = _quarter(x2, x7, x8, x13)
        x3, x4, x9, x14 = _quarter(x3, x4, x9, x14)
    out[0] = (x0 + j0) & _M32
    out[1] = (x1 + j1) & _M32
    out[2] = (x2 + j2) & _M32
    out[3] = (x3 + j3) & _M32
    out[4] = (x4 + j4) & _M32
    out[5] = (x5 + j5) & _M32
    out[6] = (x6 + j6) & _M32
    out[7] = (x7 + j7) & _M32
    out[8] = (x8 + j8) & _M32
    out[9] = (x9 + j9) & _M32
    out[10] = (x10 + j10) & _M32
    out[11] = (x11 + j11) & _M32
    out[12] = (x12 + j12) & _M32
    out[13] = (x13 + j13) & _M32
    out[14] = (x14 + j14) & _M32
    out[15] = (x15 + j15) & _M32


# A sample's cursor is the tuple (pos, block, stream, event): pos = next word of ``buf``
# (16 = exhausted), block = ChaCha20 block within the sample. Threading it through return values
# (instead of a small array) keeps it in registers; every helper returns the updated cursor.


@njit(inline="always", cache=True)
def _start(key: Words, stream: U64, event: U64, buf: Words) -> Cursor:
    chacha20_block(key, event << _S8, stream, buf)
    return (_ZERO, _ZERO, stream, event)


@njit(inline="always", cache=True)
def _word32(key: Words, buf: Words, cur: Cursor) -> tuple[U64, Cursor]:
    pos, block, stream, event = cur
    if pos == np.uint64(16):
        block += _ONE
        if block >= _BLOCKS_PER_SAMPLE:
            # Probability below 2^-1000 for every sampler here; never silently reuse words.
            raise RuntimeError("keystream of one sample exhausted")
        chacha20_block(key, (event << _S8) | block, stream, buf)
        pos = _ZERO
    return buf[pos], (pos + _ONE, block, stream, event)


@njit(inline="always", cache=True)
def _uniform_below(n: U64, key: Words, buf: Words, cur: Cursor) -> tuple[U64, Cursor]:
    """Exactly uniform integer in [0, n), 1 <= n < 2^63, by masked rejection."""
    if n == _ONE:
        return _ZERO, cur
    mask = n - _ONE
    mask |= mask >> _ONE
    mask |= mask >> np.uint64(2)
    mask |= mask >> np.uint64(4)
    mask |= mask >> _S8
    mask |= mask >> _S16
    mask |= mask >> _S32
    while True:
        u, cur = _word32(key, buf, cur)
        if n > _M32 + _ONE:
            lo, cur = _word32(key, buf, cur)
            u = (u << _S32) | lo
        u &= mask
        if u < n:
            return u, cur


@njit(inline="always", cache=True)
def _bernoulli(num: U64, den: U64, key: Words, buf: Words, cur: Cursor) -> tuple[np.bool_, Cursor]:
    """Exact Bernoulli(num/den) for integers 0 <= num <= den."""
    u, cur = _uniform_below(den, key, buf, cur)
    return u < num, cur


@njit(inline="always", cache=True)
def _bernoulli_exp(num: U64, den: U64, key: Words, buf: Words,
                   cur: Cursor) -> tuple[np.bool_, Cursor]:
    """Exact Bernoulli(exp(-num/den)) for 0 <= num <= den (Canonne-Kamath-Steinke 2020, Alg 1)."""
    k = _ONE
    while True:
        a, cur = _bernoulli(num, den * k, key, buf, cur)
        if not a:
            return (k & _ONE) == _ONE, cur
        k += _ONE


@njit(inline="always", cache=True)
def _geometric(t: U64, s: U64, key: Words, buf: Words, cur: Cursor) -> tuple[np.int64, Cursor]:
    """Exact Y with P(Y = y) ∝ e^{−y s/t}, y ≥ 0: Canonne–Kamath–Steinke 2020, Alg 2 before its
    sign (:func:`_discrete_laplace_one` adds the sign; the sparse sampler draws magnitudes)."""
    while True:
        u, cur = _uniform_below(t, key, buf, cur)
        d, cur = _bernoulli_exp(u, t, key, buf, cur)
        if not d:
            continue
        v = _ZERO
        while True:
            a, cur = _bernoulli_exp(_ONE, _ONE, key, buf, cur)
            if not a:
                break
            v += _ONE
        return np.int64((u + t * v) // s), cur


@njit(inline="always", cache=True)
def _discrete_laplace_one(t: U64, s: U64, key: Words, buf: Words, cur: Cursor) -> np.int64:
    """Exact Lap_Z(t/s): Canonne-Kamath-Steinke 2020, Alg 2 (pmf proportional to exp(-|z| s/t))."""
    while True:
        y, cur = _geometric(t, s, key, buf, cur)
        bit, cur = _word32(key, buf, cur)
        negative = (bit & _ONE) == _ONE
        if negative and y == 0:
            continue
        return -y if negative else y


@njit(cache=True)
def discrete_laplace_draw(key: Words, t: U64, s: U64, stream: U64, event: U64,
                          buf: Words) -> np.int64:
    """The exact Lap_Z(t/s) sample addressed by (stream, event): one element of
    :func:`discrete_laplace_many`, for compiled callers that interleave draws with decisions
    (PrivTree). ``buf`` is scratch space of 16 uint64 words."""
    cur = _start(key, stream, event, buf)
    return _discrete_laplace_one(t, s, key, buf, cur)


_CHUNK = 4096


@njit(cache=True)
def _discrete_laplace_range(key: Words, t: U64, s: U64, streams: Words, events: Words,
                            out: Counts, lo: int, hi: int) -> None:
    buf = np.empty(16, np.uint64)
    for i in range(lo, hi):
        cur = _start(key, streams[i], events[i], buf)
        out[i] = _discrete_laplace_one(t, s, key, buf, cur)


@njit(cache=True, parallel=True)
def _discrete_laplace_parallel(key: Words, t: U64, s: U64, streams: Words, events: Words,
                               out: Counts) -> None:
    n = out.shape[0]
    for c in prange((n + _CHUNK - 1) // _CHUNK):
        lo, hi = c * _CHUNK, min(n, (c + 1) * _CHUNK)
        _discrete_laplace_range(key, t, s, streams, events, out, lo, hi)


@njit(cache=True)
def _uniform53_range(key: Words, streams: Words, events: Words, out: Words, lo: int,
                     hi: int) -> None:
    buf = np.empty(16, np.uint64)
    for i in range(lo, hi):
        chacha20_block(key, events[i] << _S8, streams[i], buf)
        out[i] = (((buf[0] >> _S11) << _S32) | buf[1]) + _ONE


@njit(cache=True, parallel=True)
def _uniform53_parallel(key: Words, streams: Words, events: Words, out: Words) -> None:
    n = out.shape[0]
    for c in prange((n + _CHUNK - 1) // _CHUNK):
        _uniform53_range(key, streams, events, out, c * _CHUNK, min(n, (c + 1) * _CHUNK))


#: Below this many samples the thread pool's wake-up costs more than it saves
#: (docs/benchmarks.md, "Noise sampler").
_PARALLEL_MIN = 1 << 16


def discrete_laplace_many(key: Words, t: U64, s: U64, streams: Words, events: Words,
                          out: Counts) -> None:
    """Fill ``out[i]`` with the exact Lap_Z(t/s) sample addressed by (streams[i], events[i])."""
    if out.shape[0] >= _PARALLEL_MIN:
        _discrete_laplace_parallel(key, t, s, streams, events, out)
    else:
        _discrete_laplace_range(key, t, s, streams, events, out, 0, out.shape[0])


def uniform53_many(key: Words, streams: Words, events: Words, out: Words) -> None:
    """Fill ``out[i]`` with an integer uniform on [1, 2^53] addressed by (streams[i], events[i])."""
    if out.shape[0] >= _PARALLEL_MIN:
        _uniform53_parallel(key, streams, events, out)
    else:
        _uniform53_range(key, streams, events, out, 0, out.shape[0])
