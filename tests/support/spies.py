"""Spies on the noise a real run draws, for the overspending tests (tests/statistical).

Fixtures that record what the product asks the sampler for — never a mock: every draw is the
real one, only noted on the way (docs/privacy.md P14):

``draws``
    every discrete Laplace draw through ``KeyedNoise.discrete_laplace_at`` or
    ``discrete_laplace_nonzero`` (the sparse form of the same draws, P2c): its scale, noise
    address (context, as the caller passed it) and number of values;
``decisions``
    every PrivTree built by the compiled descent: its decision noise λ (in counts) and its
    "split" address.

Use them in a test module by importing them (``from tests.support.spies import draws``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from dpsynth.noise import KeyedNoise, effective_scale
from dpsynth.online import privtree_descent


@pytest.fixture
def draws(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[float, tuple, int]]]:
    """Every discrete Laplace draw made meanwhile: (scale, context, number of draws)."""
    seen: list[tuple[float, tuple, int]] = []
    real, real_nonzero = KeyedNoise.discrete_laplace_at, KeyedNoise.discrete_laplace_nonzero

    def spy(self, scale, context, streams, events):  # type: ignore[no-untyped-def]
        out = real(self, scale, context, streams, events)
        seen.append((float(scale), tuple(context), int(np.size(out))))
        return out

    def spy_nonzero(self, scale, context, size):  # type: ignore[no-untyped-def]
        seen.append((float(scale), tuple(context), int(size)))
        return real_nonzero(self, scale, context, size)

    monkeypatch.setattr(KeyedNoise, "discrete_laplace_at", spy)
    monkeypatch.setattr(KeyedNoise, "discrete_laplace_nonzero", spy_nonzero)
    yield seen


@pytest.fixture
def decisions(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[float, tuple]]]:
    """Every PrivTree built meanwhile: (its decision noise λ in counts, its split context).

    Spies around both descents of :mod:`dpsynth.online.privtree_descent` (dense and rare
    only), with λ as the sampler rounds it (σ = λ·GRID rounded up, P2a)."""
    seen: list[tuple[float, tuple]] = []

    def spy(real):  # type: ignore[no-untyped-def]
        def descend(cells, cum, params, noise, context, *rest):  # type: ignore[no-untyped-def]
            sigma = effective_scale(params.scale_units)
            seen.append((sigma.numerator / sigma.denominator / privtree_descent.GRID,
                         (*context, "split")))
            return real(cells, cum, params, noise, context, *rest)
        return descend

    for name in ("descend_dense", "descend_rare"):
        monkeypatch.setattr(privtree_descent, name, spy(getattr(privtree_descent, name)))
    yield seen


def after(context: tuple, label: str) -> object:
    """The item of a noise address that follows ``label``."""
    return context[context.index(label) + 1]
