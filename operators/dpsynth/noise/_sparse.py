"""Compiled kernels of :mod:`dpsynth.noise.sparse`: the nonzero draws of many Lap_Z, exactly.

Layer: core (private). Selection j (the j-th nonzero draw) owns the keystream of (stream j,
event 0): its first two words are the 64 leading bits of a uniform U_j, the words after them
drive the exact geometric of its value. The bits of U_j after the 64th are the words of
(stream j, event 1), read only by the exact path of :mod:`dpsynth.noise.sparse`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from dpsynth._types import Counts
from dpsynth.noise._kernels import (
    Words,
    _geometric,
    _start,
    _word32,
    chacha20_block,
)

U64 = np.uint64
_ONE, _ZERO, _S8, _S11, _S32 = U64(1), U64(0), U64(8), U64(11), U64(32)
_TWO_53 = 9007199254740992.0
#: gap(): the gap is not certified by the double-precision bounds (the exact path decides)
AMBIGUOUS = -2
#: gap(): no further draw of the vector is nonzero
BEYOND = -1


@njit(cache=True)
def gap(k53: U64, log_abs_l_lo: float, log_abs_l_hi: float, remaining: int,
        margin: float) -> int:
    """⌊ln U / ln(1 − π)⌋ (the draws skipped before the next nonzero one) when double
    precision certifies it: U ∈ [k53, k53 + 1)·2^−53 and ln|ln(1 − π)| ∈ [lo, hi] (bounds
    computed by the caller). Every logarithm and exponential here is widened by ``margin``
    relative to the magnitudes involved (libm's error is below 1 ulp, 2^−52; the margin is
    orders of magnitude above it). :data:`BEYOND` when the gap is certainly at least
    ``remaining``, :data:`AMBIGUOUS` when the bounds do not decide it (the exact path does)."""
    if k53 == _ZERO:
        return AMBIGUOUS  # U may be arbitrarily close to 0: |ln U| unbounded
    u_lo = float(k53) / _TWO_53  # both exact: integers below 2^53 + 1 over a power of two
    u_hi = float(k53 + _ONE) / _TWO_53
    la_hi = math.log(-math.log(u_lo))  # ln|ln U| ≤ ln(−ln u_lo)
    log_r_hi = la_hi - log_abs_l_lo + margin * (1.0 + abs(la_hi) + abs(log_abs_l_lo))
    log_remaining = math.log(float(remaining))
    log_r_lo = -math.inf
    if u_hi < 1.0:
        la_lo = math.log(-math.log(u_hi))
        log_r_lo = la_lo - log_abs_l_hi - margin * (1.0 + abs(la_lo) + abs(log_abs_l_hi))
        if log_r_lo >= log_remaining + margin * (1.0 + log_remaining):
            return BEYOND  # r ≥ remaining: no further draw is nonzero
    if log_r_hi > 50.0 * math.log(2.0):
        return AMBIGUOUS  # r may exceed the integers a double holds exactly
    r_hi = math.exp(log_r_hi) * (1.0 + margin)
    r_lo = math.exp(log_r_lo) * (1.0 - margin) if u_hi < 1.0 else 0.0
    g = math.floor(r_lo)
    if math.floor(r_hi) != g:
        return AMBIGUOUS
    if g >= remaining:
        return BEYOND
    return int(g)


@njit(cache=True)
def nonzero_draws(key: Words, t: U64, s: U64, size: int, log_abs_l_lo: float,
                  log_abs_l_hi: float, margin: float, forced_j: Counts, forced_gap: Counts,
                  indices: Counts, values: Counts) -> tuple[int, int]:
    """Fill ``indices`` (ascending) and ``values`` with the nonzero draws of ``size`` iid
    Lap_Z(t/s): selection j skips a geometric gap of draws (P(gap ≥ g) = (1 − π)^g, π =
    P(Lap_Z ≠ 0)) and takes the value ±(1 + Y), Y exact geometric, sign a fair bit.

    Returns (selections, j): j = −1 when done; else selection j's gap was ambiguous and the
    caller resolves it exactly, then calls again with it among ``forced_j``/``forced_gap``
    (sorted by j; −1 as a forced gap: no further selection). ``indices``/``values`` must hold
    ``size`` entries."""
    buf = np.empty(16, np.uint64)
    pos, n, forced = 0, 0, 0
    while pos < size:
        cur = _start(key, U64(n), _ZERO, buf)
        w0, cur = _word32(key, buf, cur)
        w1, cur = _word32(key, buf, cur)
        if forced < forced_j.size and forced_j[forced] == n:
            g = forced_gap[forced]
            forced += 1
        else:
            g = gap((w0 << U64(21)) | (w1 >> _S11), log_abs_l_lo, log_abs_l_hi, size - pos,
                    margin)
            if g == AMBIGUOUS:
                return n, n
        if g < 0 or pos + g >= size:
            break
        y, cur = _geometric(t, s, key, buf, cur)
        bit, cur = _word32(key, buf, cur)
        indices[n] = pos + g
        values[n] = -(y + 1) if (bit & _ONE) == _ONE else y + 1
        pos += g + 1
        n += 1
    return n, -1


@njit(cache=True)
def keystream_words(key: Words, stream: U64, event: U64, count: int) -> Words:
    """The first ``count`` 32-bit words of the keystream of (stream, event), for the exact
    path (≤ 4096 words: the 256 blocks of one sample)."""
    out = np.empty(count, np.uint64)
    buf = np.empty(16, np.uint64)
    for i in range(count):
        if i % 16 == 0:
            chacha20_block(key, (event << _S8) | U64(i // 16), stream, buf)
        out[i] = buf[i % 16]
    return out
