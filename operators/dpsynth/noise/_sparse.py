"""Compiled kernels of :mod:`dpsynth.noise.sparse`: rare events among many iid trials, exactly.

Layer: core (private). A process of ``event`` e: selection j (the j-th rare trial) owns the
keystream of (stream j, event 2e): its first two words are the 64 leading bits of a uniform
U_j, the words after them drive the exact geometric of its value (nonzero Lap_Z draws only).
The bits of U_j after the 64th are the words of (stream j, event 2e + 1), read only by the
exact path of :mod:`dpsynth.noise.sparse`.
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
#: Relative widening of every double-precision result (libm's error is below 2^−52 ≈ 2·10⁻¹⁶).
MARGIN = 1e-12
#: Below this rate r, ln|ln(1 − r)| is bracketed by [ln r, ln r + 2r] (−ln(1 − r) ∈ [r, r/(1 − r)]).
_SMALL_RATE = 1e-4


@njit(cache=True)
def rate_bounds(log_rate: float) -> tuple[float, float]:
    """Bounds on ln|ln(1 − r)| for a rate r = e^{log_rate} ≤ ½ given in double precision,
    widened by :data:`MARGIN` for ``log_rate``'s own rounding and for libm's (the kernel
    widens its own steps again)."""
    rate = math.exp(log_rate)
    slack = MARGIN * (1.0 + abs(log_rate))
    if rate < _SMALL_RATE:
        return log_rate - slack, log_rate + 2.0 * rate + slack
    value = math.log(-math.log1p(-rate))
    slack += MARGIN * (1.0 + abs(value))
    return value - slack, value + slack


@njit(cache=True)
def tail_rate_bounds(t: U64, s: U64, n: int, c: int) -> tuple[float, float]:
    """:func:`rate_bounds` of r = c·p^n/(1 + p), p = e^{−s/t}: P(Lap_Z(t/s) ≥ n) for c = 1,
    π = P(Lap_Z ≠ 0) for c = 2, n = 1 (ln r in double precision; the bounds absorb its
    rounding)."""
    x = float(s) / float(t)
    return rate_bounds(math.log(float(c)) - float(n) * x - math.log1p(math.exp(-x)))


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
def rare_draws(key: Words, t: U64, s: U64, event: U64, size: int, log_abs_l_lo: float,
               log_abs_l_hi: float, margin: float, forced_j: Counts, forced_gap: Counts,
               indices: Counts, values: Counts) -> tuple[int, int]:
    """Fill ``indices`` (ascending) with the rare trials among ``size`` iid Bernoulli(r),
    ln|ln(1 − r)| ∈ [lo, hi]: selection j skips a geometric gap (P(gap ≥ g) = (1 − r)^g). For
    the nonzero draws of Lap_Z(t/s) (r = π = P(Lap_Z ≠ 0)), ``values`` (``size`` entries)
    receives each one's value ±(1 + Y), Y exact geometric, sign a fair bit; an empty
    ``values`` draws positions only.

    Returns (selections, j): j = −1 when done; else selection j's gap was ambiguous and the
    caller resolves it exactly, then calls again with it among ``forced_j``/``forced_gap``
    (sorted by j; −1 as a forced gap: no further selection). ``indices`` must hold ``size``
    entries."""
    buf = np.empty(16, np.uint64)
    pos, n, forced = 0, 0, 0
    with_values = values.size > 0
    while pos < size:
        cur = _start(key, U64(n), event << _ONE, buf)
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
        indices[n] = pos + g
        if with_values:
            y, cur = _geometric(t, s, key, buf, cur)
            bit, cur = _word32(key, buf, cur)
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
