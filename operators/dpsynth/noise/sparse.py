"""The nonzero draws of many iid discrete Laplace variables, exactly, at a cost of the nonzero.

Layer: core (privacy: P2c). At a large ε almost every draw of Lap_Z(σ) is 0 — P(Z ≠ 0) =
π = 2p/(1+p), p = e^{−1/σ}, is 4·10⁻⁹ at σ = 1/20 — so drawing every leaf of a fine histogram
spends almost all of its time producing zeros. :func:`nonzero_draws` returns, for ``size``
iid draws Z_0 … Z_{size−1}, the positions i with Z_i ≠ 0 and their values, with exactly the
joint distribution of drawing them all:

* the positions are a Bernoulli(π) process: the number of zeros before the next nonzero draw is
  geometric, P(gap ≥ g) = (1 − π)^g, sampled by inversion, gap = ⌊ln U / ln(1 − π)⌋, of a
  uniform U whose bits are read from the keyed stream as far as needed (below);
* each value, given that it is nonzero, is ±(1 + Y) with a fair sign and Y exact geometric,
  P(Y = y) ∝ p^y (Canonne, Kamath and Steinke 2020, Alg 2 before its sign): P(|Z| = 1 + y |
  Z ≠ 0) = 2p^{1+y} / (2p/(1 − p)) = (1 − p)p^y.

Because this is the same distribution, every privacy statement made for the dense draws holds
unchanged (a mechanism is a distribution over outputs); only which keystream words are read
differs, so releases keep their distribution and change their bytes.

**Exact inversion.** The gap is an integer floor of a real ratio. U is an infinite sequence of
fair bits: its first 64 are two keystream words; the double-precision path brackets U by its
first 53 bits and ln|ln(1 − π)| by bounds computed here, widens every libm result by a relative
margin of 10⁻¹² (libm errs below 2^−52), and decides only when the whole bracket has one
floor. Otherwise (about once in 10¹¹ gaps) :func:`exact_gap` decides in decimal interval
arithmetic — directed rounding for +, −, ×, ÷; exp and ln correctly rounded and widened by one
ulp — reading 64 more bits of U per round and doubling the precision until the bracket has one
floor. Both paths bracket the same real U, so they agree whenever the fast one decides (tested
by forcing every gap through the exact path).

**Tail events.** The same process at a rate r = P(Z ≥ n) = p^n/(1 + p), n ≥ 1, without
values, is :func:`tail_positions`: which of many iid trials have Z ≥ n. A PrivTree draws its
nearly certain split decisions this way (docs/privacy.md P10).

Addresses: selection j (the j-th rare trial) of a process at event e owns (context, stream j,
event 2e); U's bits after the 64th are (context, stream j, event 2e + 1). The nonzero draws
are at e = 0. Callers pass a context of their own.
"""

from __future__ import annotations

import decimal
import math
from decimal import Decimal

import numpy as np

from dpsynth._types import Counts
from dpsynth.noise import _sparse
from dpsynth.noise._kernels import Words
from dpsynth.noise.samplers import effective_scale

MARGIN = _sparse.MARGIN


def nonzero_share(scale: float) -> float:
    """π = P(Lap_Z(σ′) ≠ 0) = 2p/(1 + p) at the effective scale σ′ of ``scale``."""
    sigma = effective_scale(scale)
    return _share(sigma.numerator, sigma.denominator)


def _share(t: int, s: int) -> float:
    """π = 2p/(1 + p), p = e^{−s/t}."""
    p = math.exp(-s / t)
    return 2.0 * p / (1.0 + p)


def _log_abs_log_bounds(t: int, s: int) -> tuple[float, float]:
    """Bounds on ln|ln(1 − π)|, π = 2p/(1 + p), p = e^{−s/t}, in double precision, widened by
    :data:`MARGIN` (the kernel widens its own steps again)."""
    return _sparse.tail_rate_bounds(np.uint64(t), np.uint64(s), 1, 2)


#: Rounds of the exact path (64 bits of U each; the words of (stream j, event 2e + 1) hold
#: 2048): a bracket still straddling an integer after 4096 bits has probability below 2^−4000.
MAX_ROUNDS = 64
#: The sampler is for rare nonzero draws: refused above this π (its double-precision bounds
#: assume 1 − π is not tiny; the callers switch at π ≤ 1/4).
MAX_SHARE = 0.5


def nonzero_bounds(t: int, s: int) -> tuple[float, float]:
    """Bounds of ln|ln(1 − π)| for Lap_Z(t/s), as the kernel takes them; ValueError where
    π > :data:`MAX_SHARE` (draw every value instead)."""
    if _share(t, s) > MAX_SHARE:
        raise ValueError(f"P(Lap_Z ≠ 0) above {MAX_SHARE}: draw every value instead")
    return _log_abs_log_bounds(t, s)


def nonzero_draws(key: Words, t: int, s: int, size: int, *,
                  margin: float = MARGIN) -> tuple[Counts, Counts]:
    """(positions ascending, values) of the nonzero draws among ``size`` iid Lap_Z(t/s), from
    the keystream of ``key`` (a context's subkey) at event 0; t/s is the effective scale the
    caller rounded up (P2a). ``margin``: the fast path's widening (tests raise it to force
    the exact path on every gap)."""
    lo, hi = nonzero_bounds(t, s)
    return _draws(key, t, s, size, (2, 1), 0, lo, hi, True, margin)


def tail_positions(key: Words, t: int, s: int, n: int, event: int, size: int, *,
                   margin: float = MARGIN) -> Counts:
    """The positions (ascending) of the trials with Z ≥ n among ``size`` iid Lap_Z(t/s),
    n ≥ 1 — each such trial has probability r = p^n/(1 + p) ≤ ½ — from the keystream of
    ``key`` at ``event`` (< 2^55): the Bernoulli(r) process, exactly, at the cost of its
    events (a PrivTree's decisions, :mod:`dpsynth.online.privtree_descent`)."""
    if n < 1:
        raise ValueError("tail_positions draws P(Z ≥ n) for n ≥ 1 only")
    lo, hi = _sparse.tail_rate_bounds(np.uint64(t), np.uint64(s), n, 1)
    return _draws(key, t, s, size, (1, n), event, lo, hi, False, margin)[0]


def _draws(key: Words, t: int, s: int, size: int, rate: tuple[int, int], event: int,
           lo: float, hi: float, values: bool, margin: float) -> tuple[Counts, Counts]:
    """The kernel's selections, each gap it cannot decide decided by :func:`exact_gap`."""
    indices = np.empty(size, np.int64)
    out = np.empty(size if values else 0, np.int64)
    forced_j: list[int] = []
    forced_gap: list[int] = []
    while True:
        n, ambiguous = _sparse.rare_draws(
            key, np.uint64(t), np.uint64(s), np.uint64(event), size, lo, hi, margin,
            np.array(forced_j, np.int64), np.array(forced_gap, np.int64), indices, out)
        if ambiguous < 0:
            return indices[:n].copy(), out[:n].copy()
        start = int(indices[n - 1]) + 1 if n else 0
        forced_j.append(ambiguous)
        forced_gap.append(exact_gap(key, ambiguous, t, s, size - start, rate=rate,
                                    event=event))


def _uniform_bits(key: Words, j: int, rounds: int, event: int = 0) -> tuple[int, int]:
    """(integer, bits) of U_j's first 64·``rounds`` bits: two words of (j, 2e), then
    (j, 2e + 1)'s."""
    first = _sparse.keystream_words(key, np.uint64(j), np.uint64(2 * event), 2)
    words = [int(first[0]), int(first[1])]
    if rounds > 1:
        more = _sparse.keystream_words(key, np.uint64(j), np.uint64(2 * event + 1),
                                       2 * (rounds - 1))
        words += [int(w) for w in more]
    value = 0
    for word in words:
        value = (value << 32) | word
    return value, 32 * len(words)


def exact_gap(key: Words, j: int, t: int, s: int, remaining: int, *,
              rate: tuple[int, int] = (2, 1), event: int = 0) -> int:
    """Selection j's gap ⌊ln U_j / ln(1 − r)⌋, r = c·p^n/(1 + p) for ``rate`` = (c, n) (π by
    default), decided in decimal interval arithmetic (−1 when it is at least ``remaining``):
    64 more bits of U and twice the digits per round."""
    digits, rounds = 40, 1
    while True:
        value, bits = _uniform_bits(key, j, rounds, event)
        low, high = _ratio_bounds(value, bits, t, s, digits, rate)
        if low >= remaining:
            return -1
        g = math.floor(low)  # low < remaining: a small integer
        if high is not None and high < g + 1:  # never int(high): it may be astronomical
            return int(g)
        digits, rounds = 2 * digits, rounds + 1
        if rounds > MAX_ROUNDS:  # never silently read another address's words
            raise RuntimeError("exact gap undecided after 64 rounds")


def _ratio_bounds(value: int, bits: int, t: int, s: int, digits: int,
                  rate: tuple[int, int] = (2, 1)) -> tuple[Decimal, Decimal | None]:
    """Bounds on |ln U| / |ln(1 − r)|, r = c·p^n/(1 + p) for ``rate`` = (c, n), for
    U ∈ [value, value + 1)·2^−bits (None: no upper bound, U may be near 0), at ``digits``
    significant digits with directed rounding (exponents unbounded: p^n may be tiny)."""
    lo_e, hi_e = decimal.MIN_EMIN, decimal.MAX_EMAX
    down = decimal.Context(prec=digits, rounding=decimal.ROUND_FLOOR, Emin=lo_e, Emax=hi_e)
    up = decimal.Context(prec=digits, rounding=decimal.ROUND_CEILING, Emin=lo_e, Emax=hi_e)
    near = decimal.Context(prec=digits, Emin=lo_e, Emax=hi_e)  # exp, ln to nearest: +1 ulp
    # every step names its context: Decimal's operators (unary minus too) would round in the
    # thread's context (28 digits, to nearest), which is no bound; copy_negate is exact

    def exp(x: Decimal, ctx: decimal.Context) -> Decimal:
        y = x.exp(near)
        return near.next_minus(y) if ctx is down else near.next_plus(y)

    def ln(x: Decimal, ctx: decimal.Context) -> Decimal:
        y = x.ln(near)
        return near.next_minus(y) if ctx is down else near.next_plus(y)

    c, n = rate
    x_lo, x_hi = down.divide(s, t), up.divide(s, t)  # 1/σ
    p_lo, p_hi = exp(x_hi.copy_negate(), down), exp(x_lo.copy_negate(), up)
    pn_lo = exp(down.multiply(n, x_hi).copy_negate(), down)  # p^n
    pn_hi = exp(up.multiply(n, x_lo).copy_negate(), up)
    pi_lo = down.divide(down.multiply(c, pn_lo), up.add(1, p_hi))  # r, bounded termwise
    pi_hi = up.divide(up.multiply(c, pn_hi), down.add(1, p_lo))
    abs_l_lo = pi_lo  # −ln(1 − π) ≥ π
    q_hi = up.subtract(1, pi_lo)
    if q_hi < 1:
        abs_l_lo = max(abs_l_lo, ln(q_hi, up).copy_negate())
    abs_l_hi = up.divide(pi_hi, down.subtract(1, pi_hi))  # −ln(1 − π) ≤ π/(1 − π)
    q_lo = down.subtract(1, pi_hi)
    abs_l_hi = min(abs_l_hi, ln(q_lo, down).copy_negate())
    u_lo = down.divide(value, 1 << bits)
    u_hi = up.divide(value + 1, 1 << bits)
    a_lo = Decimal(0) if u_hi >= 1 else ln(u_hi, up).copy_negate()
    low = down.divide(a_lo, abs_l_hi)
    if u_lo <= 0:
        return low, None
    a_hi = ln(u_lo, down).copy_negate()
    return low, up.divide(a_hi, abs_l_lo)
