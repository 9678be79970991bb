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

    def counted(*args):  # type: ignore[no-untyped-def]
        calls.append(args)
        return real(*args)

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
