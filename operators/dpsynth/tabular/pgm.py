"""PGM fit (paper 003 §4.2.2): a graphical model estimated by private-pgm (`mbi`).

Layer: core; post-processing only (it sees noisy measurements and the model, never data).
The paper's description and what it leaves open: docs/algorithms.md S.2.6.
Optional extra: ``pip install 'dpsynth[pgm]'``; ``mbi`` and JAX are imported lazily, here only.

The paper fits ``P_θ(x) = exp(Σ_{C∈𝒞} θ_C(x_C)) / Z`` with private-pgm's proximal (mirror
descent) solver; iterations, warm start and the handling of the count are not given (amb.).
Decisions (docs/tabular.md T14):

- 𝒞 = the workloads measured so far in this step, plus every attribute no measured workload
  covers. For those, the 1-way marginal of the start weights h (the previous model rescaled
  to |f_t|, public) enters as a pseudo-measurement, so an unmeasured pair defaults to the
  maximum-entropy (independent) coupling of its 1-way marginals instead of the previous
  model's pair. (Pseudo-measurements on covered attributes would pull them to h's margins.)
- Every measurement (real or pseudo) gets the same noise standard deviation ``stddev``
  (√2·s/ε_measure for Laplace); the total is the public record count, ``h.sum()``.
- Warm start: within one step, each fit starts from the previous fit's potentials (the clique
  set only grows, so mbi can expand them). Nothing crosses steps except h, so snapshots need
  no PGM state and a restored run equals an uninterrupted one.
- Output: the same weights over the particle support as the MW fit. On a full-domain support
  (|X| ≤ ``full_domain_limit``) they are P_θ itself times the total; on a sampled support h is
  MW-projected (ratio rule) onto P_θ's clique marginals.

Privacy: unchanged — the input is ε-DP measurements and public counts, and the fit is
post-processing. No randomness is used.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from dpsynth.errors import ConfigError
from dpsynth.tabular.model import ParticleModel

_MISSING = "fit='pgm' needs the optional extra: pip install 'dpsynth[pgm]'"


def require_mbi() -> Any:
    """The ``mbi`` module, or a ConfigError that says how to install it."""
    try:
        with warnings.catch_warnings():  # mbi warns about JAX's float32 mode at import
            warnings.simplefilter("ignore")
            import mbi
    except ImportError:
        raise ConfigError(_MISSING) from None
    return mbi


def step_fit(fit_name: str, model: ParticleModel, *, stddev: float) -> Any:
    """A step's fit: ``model.fit`` (``"mw"``) or a fresh :class:`PGMFit` (no PGM state kept
    across steps) for measurements of noise standard deviation ``stddev``."""
    if fit_name == "mw":
        return model.fit
    return PGMFit(model, stddev=stddev)


class PGMFit:
    """Callable fit with the shape of :meth:`ParticleModel.fit`, warm-started within a step.

    Call :meth:`new_step` at the start of every step (drops the warm-start potentials).
    """

    def __init__(self, model: ParticleModel, *, stddev: float, iters: int = 300) -> None:
        if not stddev > 0:
            raise ConfigError(f"PGM noise stddev ({stddev!r}) must be > 0")
        if iters < 1:
            raise ConfigError(f"PGM iters ({iters!r}) must be >= 1")
        self.mbi = require_mbi()
        self.model, self.stddev, self.iters = model, float(stddev), int(iters)
        sizes = model.workloads.sizes
        self.names = tuple(f"a{j}" for j in range(len(sizes)))
        self.domain = self.mbi.Domain(self.names, sizes)
        self._potentials: Any = None

    def new_step(self) -> None:
        self._potentials = None

    def _measurements(self, weights: np.ndarray,
                      measurements: list[tuple[int, np.ndarray]]) -> list[Any]:
        mbi, sizes, names = self.mbi, self.model.workloads.sizes, self.names
        out = []
        covered = {c for i, _ in measurements for c in self.model.workloads.pairs[i]}
        for a, size in enumerate(sizes):  # pseudo-measurements: h's 1-way marginals
            if a in covered:
                continue
            marginal = np.bincount(self.model.support[:, a], weights=weights, minlength=size)
            out.append(mbi.LinearMeasurement(marginal, (names[a],), stddev=self.stddev))
        for i, m in measurements:
            a, b = self.model.workloads.pairs[i]
            out.append(mbi.LinearMeasurement(np.asarray(m, np.float64), (names[a], names[b]),
                                             stddev=self.stddev))
        return out

    def estimate(self, weights: np.ndarray, measurements: list[tuple[int, np.ndarray]]) -> Any:
        """The mbi MarkovRandomField fitted to ``measurements`` and h's 1-way marginals."""
        total = float(weights.sum())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fitted = self.mbi.estimation.MirrorDescent().estimate(
                self.domain, self._measurements(weights, measurements), known_total=total,
                iters=self.iters, warm_start=self._potentials)
        self._potentials = fitted.potentials
        return fitted

    def __call__(self, weights: np.ndarray, measurements: list[tuple[int, np.ndarray]], *,
                 passes: int, rule: str = "ratio", lr: float = 1.0) -> np.ndarray:
        """New support weights (mass kept) from a PGM fit; ``passes``/``rule``/``lr`` drive
        the MW projection on a sampled support."""
        total = float(weights.sum())
        if total <= 0:
            return weights.copy()
        fitted = self.estimate(weights, measurements)
        if self.model.full:
            joint = np.asarray(fitted.project(self.names).datavector(), np.float64)
            joint = np.maximum(joint, 0.0)
            scaled: np.ndarray = joint * (total / joint.sum())
            return scaled
        targets = []
        for i, _ in measurements:
            a, b = self.model.workloads.pairs[i]
            table = fitted.project((self.names[a], self.names[b])).datavector()
            targets.append((i, np.asarray(table, np.float64)))
        return self.model.fit(weights, targets, passes=passes, rule=rule, lr=lr)
