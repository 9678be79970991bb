"""Measured variants of the tabular synthesizer's targets (docs/tabular.md T6, T16).

Layer: core; post-processing of the counters' outputs. Both variants rescale a counter by how
many records it was fed, a count that is public only under replacement neighbours, so the
synthesizer refuses them under add/remove (docs/privacy.md P12).
"""

from __future__ import annotations

import numpy as np

from dpsynth.tabular.counters import Counter
from dpsynth.tabular.model import ParticleModel


def sample_replay(counters: list[Counter], fed_records: np.ndarray, records: float,
                  measured: list[tuple[int, np.ndarray]]) -> list[tuple[int, np.ndarray]]:
    """``estimator="sample"`` (T6): this step's measurements after every other fed workload's
    estimate n_t · C_i(t) / (records fed to C_i), MWEM-style replay."""
    now = {j for j, _ in measured}
    others = [(i, counters[i].value * (records / fed_records[i]))
              for i in np.flatnonzero(fed_records > 0) if int(i) not in now]
    return others + measured


def pooled_marginals(model: ParticleModel, counters: list[Counter], fed_records: np.ndarray,
                     records: float, g: np.ndarray) -> np.ndarray:
    """T16: each attribute's 1-way marginal estimated from every counter whose workload
    contains it — Σ_i margin(C_i(t)) / Σ_i (records fed to C_i), times |f_t| — and fitted by
    one multiplicative (ratio) step per attribute."""
    workloads = model.workloads
    sizes = workloads.sizes
    sums = [np.zeros(s_) for s_ in sizes]
    fed = np.zeros(len(sizes))
    for i, (a, b) in enumerate(workloads.pairs):
        if fed_records[i] == 0:
            continue
        table = counters[i].value.reshape(sizes[a], sizes[b]).astype(np.float64)
        sums[a] += table.sum(axis=1)
        sums[b] += table.sum(axis=0)
        fed[a] += fed_records[i]
        fed[b] += fed_records[i]
    w = g.copy()
    total = float(w.sum())
    for a, size in enumerate(sizes):
        if fed[a] == 0 or total <= 0:
            continue
        target = np.maximum(sums[a], 0.0) * (records / fed[a])
        codes = model.support[:, a]
        q = np.bincount(codes, weights=w, minlength=size)
        w *= ((target + 1e-3) / (q + 1e-3))[codes]
        w *= total / w.sum()
    return w
