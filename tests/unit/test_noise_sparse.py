"""The sparse sampler's exact inversion (dpsynth.noise.sparse, docs/privacy.md P2c): the fast
double-precision path decides only what the exact decimal path decides the same way."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest

from dpsynth.noise import KeyedNoise, effective_scale, sparse
from dpsynth.noise import _sparse as kernels

KEY = bytes(range(32))


def _sigma(scale: float) -> tuple[int, int]:
    sigma = effective_scale(scale)
    return sigma.numerator, sigma.denominator


@pytest.mark.parametrize("scale", [0.05, 0.2, 0.45, 0.9])
def test_P2c_forcing_the_exact_path_gives_the_same_draws(monkeypatch, scale: float) -> None:
    """With the fast path's margin so wide that it decides no gap, every gap goes through the
    decimal interval arithmetic: the same positions and values, for 5 keys."""
    calls = []
    real = sparse.exact_gap

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(sparse, "exact_gap", counted)
    t, s = _sigma(scale)
    size = 400
    for k in range(5):
        key = KeyedNoise(bytes([k]) * 32).subkey(("sparse", "exact"))
        fast = sparse.nonzero_draws(key, t, s, size)
        before = len(calls)
        slow = sparse.nonzero_draws(key, t, s, size, margin=100.0)
        assert len(calls) - before == fast[0].size + 1 or len(calls) - before == fast[0].size
        assert np.array_equal(fast[0], slow[0]) and np.array_equal(fast[1], slow[1])
    assert sum(1 for _ in calls) > 0


def test_P2c_exact_gap_is_the_floor_of_the_ratio() -> None:
    """Each gap equals ⌊ln U / ln(1 − π)⌋ computed here in 80-digit decimal from U's first 128
    bits (far from an integer for these draws, so 128 bits decide it)."""
    t, s = _sigma(0.3)
    key = KeyedNoise(KEY).subkey(("sparse", "floor"))
    with localcontext() as ctx:
        ctx.prec = 80
        p = (Decimal(-s) / Decimal(t)).exp()
        pi = 2 * p / (1 + p)
        log_q = (1 - pi).ln()
        for j in range(40):
            value, bits = sparse._uniform_bits(key, j, 2)
            u = (Decimal(value) + Decimal("0.5")) / Decimal(2) ** bits
            ratio = u.ln() / log_q
            assert abs(ratio - ratio.to_integral_value()) > Decimal("1e-20")
            assert sparse.exact_gap(key, j, t, s, 10**9) == math.floor(ratio)


def test_P2c_fast_gap_refuses_what_it_cannot_certify() -> None:
    """U's 53-bit bracket straddling an integer ratio, or U possibly 0, is left to the exact
    path (AMBIGUOUS); a certainly-too-long gap is BEYOND."""
    lo, hi = sparse._log_abs_log_bounds(*_sigma(0.5))
    assert kernels.gap(np.uint64(0), lo, hi, 10, 1e-12) == kernels.AMBIGUOUS
    assert kernels.gap(np.uint64(1), lo, hi, 10, 1e-12) == kernels.BEYOND  # U ≈ 2^-53
    # U near (1 − π)^1: the ratio near 1
    _, s_ = _sigma(0.5)
    p = math.exp(-s_ / _sigma(0.5)[0])
    edge = int((1 - 2 * p / (1 + p)) * 2.0**53)
    assert kernels.gap(np.uint64(edge), lo, hi, 10, 1e-12) == kernels.AMBIGUOUS
    assert kernels.gap(np.uint64(edge - 10**6), lo, hi, 10, 1e-12) == 1
    assert kernels.gap(np.uint64(edge + 10**6), lo, hi, 10, 1e-12) == 0


def test_P2c_addresses_are_their_own() -> None:
    """The sparse draws of ``context`` read (context + ("nonzero",)): deterministic, and not
    the keystream of the dense draws of ``context``; refused where nonzero is common."""
    noise = KeyedNoise(KEY)
    a = noise.discrete_laplace_nonzero(0.4, ("c",), 5000)
    b = KeyedNoise(KEY).discrete_laplace_nonzero(0.4, ("c",), 5000)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    other = noise.discrete_laplace_nonzero(0.4, ("d",), 5000)
    assert not np.array_equal(a[0], other[0])
    assert noise.discrete_laplace_nonzero(0.4, ("c",), 0)[0].size == 0
    with pytest.raises(ValueError, match="draw every value"):
        noise.discrete_laplace_nonzero(5.0, ("c",), 10)
    with pytest.raises(ValueError):
        noise.discrete_laplace_nonzero(0.4, ("c",), -1)


@pytest.mark.parametrize(("scale", "n"), [(1.57, 1), (1.57, 3), (5.0, 2), (0.56, 9), (40.0, 30)])
def test_P2c_tail_positions_forced_exact_path_agrees(scale: float, n: int) -> None:
    """The rare-outcome process (P(Z ≥ n) per trial): every gap forced through the decimal
    exact path gives the same positions, for 3 keys and two events."""
    t, s = _sigma(scale)
    for k in range(3):
        key = KeyedNoise(bytes([k]) * 32).subkey(("sparse", "tail"))
        for event in (0, 12345):
            fast = sparse.tail_positions(key, t, s, n, event, 300)
            slow = sparse.tail_positions(key, t, s, n, event, 300, margin=100.0)
            np.testing.assert_array_equal(fast, slow)
    with pytest.raises(ValueError, match="n ≥ 1"):
        sparse.tail_positions(key, t, s, 0, 0, 10)


@pytest.mark.parametrize(("scale", "n"), [(1.57, 1), (1.57, 4), (5.0, 2), (5.0, 12), (0.3, 2)])
def test_P2c_tail_positions_have_the_tail_probability(scale: float, n: int) -> None:
    """Each trial is selected with r = p^n/(1 + p) = P(Lap_Z ≥ n): 40 fixed keys × 5,000
    trials, two-sided binomial test at α = 1e-5 (normal approximation, 4.42 σ; the expected
    count is ≥ 60 for every case), and the gaps are memoryless: the share of selections
    that follow their predecessor directly is r (same test)."""
    t, s = _sigma(scale)
    p = math.exp(-s / t)
    rate = p**n / (1 + p)
    size, total, adjacent, pairs = 5000, 0, 0, 0
    for k in range(40):
        at = sparse.tail_positions(KeyedNoise(bytes([k, 7]) * 16).subkey(("tail",)), t, s, n,
                                   3, size)
        assert np.all(np.diff(at) > 0) and (at.size == 0 or 0 <= at[0] and at[-1] < size)
        total += at.size
        adjacent += int(np.sum(np.diff(at) == 1))
        pairs += int(np.sum(at < size - 1))
    trials = 40 * size
    assert trials * rate >= 60
    assert abs(total - trials * rate) < 4.42 * math.sqrt(trials * rate * (1 - rate)), total
    assert abs(adjacent - pairs * rate) < 4.42 * math.sqrt(pairs * rate * (1 - rate)) + 1


def test_P2c_tail_exact_gap_is_the_floor_of_the_ratio() -> None:
    """At a tail rate the exact gap equals ⌊ln U / ln(1 − r)⌋ in 80-digit decimal, and at a
    vanishing rate (n = 10⁶: r ≈ e^−10⁶, beyond any double) it is 'beyond the vector'."""
    t, s = _sigma(1.57)
    key = KeyedNoise(KEY).subkey(("sparse", "tail-floor"))
    with localcontext() as ctx:
        ctx.prec = 80
        p = (Decimal(-s) / Decimal(t)).exp()
        for n in (1, 5):
            log_q = (1 - p**n / (1 + p)).ln()
            for j in range(20):
                value, bits = sparse._uniform_bits(key, j, 2, event=9)
                u = (Decimal(value) + Decimal("0.5")) / Decimal(2) ** bits
                ratio = u.ln() / log_q
                assert abs(ratio - ratio.to_integral_value()) > Decimal("1e-20")
                got = sparse.exact_gap(key, j, t, s, 10**9, rate=(1, n), event=9)
                assert got == math.floor(ratio)
    assert sparse.exact_gap(key, 0, t, s, 10**9, rate=(1, 10**6), event=9) == -1
    assert sparse.tail_positions(key, t, s, 10**6, 9, 1000, margin=100.0).size == 0
