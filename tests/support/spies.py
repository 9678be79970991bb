"""Spies on the noise a real run draws, for the overspending tests (tests/statistical).

Fixtures that record what the product asks the sampler for — never a mock: every draw is the
real one, only noted on the way (docs/privacy.md P14):

``draws``
    every discrete Laplace draw through ``KeyedNoise.discrete_laplace_at`` or
    ``discrete_laplace_nonzero`` (the sparse form of the same draws, P2c): its scale, noise
    address (context, as the caller passed it) and number of values;
``decisions``
    every PrivTree built by the compiled descent: its decision noise λ (in counts) and its
    "split" address; ``decisions.forms`` the descent of each ("descent: dense" or "descent:
    rare", P10);
``keyed_draws``
    every keyed draw of any kind — the two Lap_Z forms, both descents, the geometric and
    uniform draws — as (form, address): what ``tests/statistical/test_draw_coverage.py``
    enumerates against ``benchmarks.draws``.

``draws.forms`` holds, in step with ``draws``, the path of each: "dense" (one Lap_Z per value)
or "sparse" (the nonzero draws only, P2c).

Use them in a test module by importing them (``from tests.support.spies import draws``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from dpsynth.noise import KeyedNoise, effective_scale
from dpsynth.online import privtree_descent


class Log(list):  # type: ignore[type-arg]
    """A list of what was drawn, with the path of each entry in ``forms`` (same order)."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[str] = []

    def note(self, entry: tuple, form: str) -> None:  # type: ignore[type-arg]
        """Append ``entry`` drawn by ``form``."""
        self.append(entry)
        self.forms.append(form)


@pytest.fixture
def draws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Log]:
    """Every discrete Laplace draw made meanwhile: (scale, context, number of draws)."""
    seen = Log()
    real, real_nonzero = KeyedNoise.discrete_laplace_at, KeyedNoise.discrete_laplace_nonzero

    def spy(self, scale, context, streams, events):  # type: ignore[no-untyped-def]
        out = real(self, scale, context, streams, events)
        seen.note((float(scale), tuple(context), int(np.size(out))), "dense")
        return out

    def spy_nonzero(self, scale, context, size):  # type: ignore[no-untyped-def]
        seen.note((float(scale), tuple(context), int(size)), "sparse")
        return real_nonzero(self, scale, context, size)

    monkeypatch.setattr(KeyedNoise, "discrete_laplace_at", spy)
    monkeypatch.setattr(KeyedNoise, "discrete_laplace_nonzero", spy_nonzero)
    yield seen


@pytest.fixture
def decisions(monkeypatch: pytest.MonkeyPatch) -> Iterator[Log]:
    """Every PrivTree built meanwhile: (its decision noise λ in counts, its split context).

    Spies around both descents of :mod:`dpsynth.online.privtree_descent` (dense and rare
    only), with λ as the sampler rounds it (σ = λ·GRID rounded up, P2a)."""
    seen = Log()

    def spy(real, form):  # type: ignore[no-untyped-def]
        def descend(cells, cum, params, noise, context, *rest):  # type: ignore[no-untyped-def]
            sigma = effective_scale(params.scale_units)
            seen.note((sigma.numerator / sigma.denominator / privtree_descent.GRID,
                       (*context, "split")), form)
            return real(cells, cum, params, noise, context, *rest)
        return descend

    for name, form in DESCENTS.items():
        monkeypatch.setattr(privtree_descent, name, spy(getattr(privtree_descent, name), form))
    yield seen


#: The PrivTree descents and the path each is (P10).
DESCENTS = {"descend_dense": "descent: dense", "descend_rare": "descent: rare"}


@pytest.fixture
def keyed_draws(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, tuple]]]:
    """Every keyed draw made meanwhile, of any kind: (form, context)."""
    seen: list[tuple[str, tuple]] = []

    def spy(real, form, position):  # type: ignore[no-untyped-def]
        def noted(*args, **kwargs):  # type: ignore[no-untyped-def]
            context = kwargs["context"] if "context" in kwargs else args[position]
            seen.append((form, tuple(context)))
            return real(*args, **kwargs)
        return noted

    for name, form, position in (("discrete_laplace_at", "dense", 2),
                                 ("discrete_laplace_nonzero", "sparse", 2),
                                 ("geometric_at", "geometric", 2),
                                 ("uniform_at", "uniform", 1)):
        monkeypatch.setattr(KeyedNoise, name, spy(getattr(KeyedNoise, name), form, position))
    for name, form in DESCENTS.items():
        real = getattr(privtree_descent, name)

        def descend(cells, cum, params, noise, context, *rest,  # type: ignore[no-untyped-def]
                    _real=real, _form=form):
            seen.append((_form, (*context, "split")))
            return _real(cells, cum, params, noise, context, *rest)
        monkeypatch.setattr(privtree_descent, name, descend)
    yield seen


def expected_form(epsilon: float) -> str:
    """The path a histogram's leaf noise Lap_Z(1/ε) must take (P2c, a public rule): the
    sparse form where P(Lap_Z ≠ 0) ≤ ``NONZERO_SHARE``, else one dense draw per leaf."""
    from dpsynth.noise.sparse import nonzero_share
    from dpsynth.online.privtree import NONZERO_SHARE

    return "sparse" if nonzero_share(1 / epsilon) <= NONZERO_SHARE else "dense"


def after(context: tuple, label: str) -> object:
    """The item of a noise address that follows ``label``."""
    return context[context.index(label) + 1]
