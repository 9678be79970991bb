"""Pooled 1-way marginals, a measured variant of the tabular fit (docs/tabular.md T16).

Layer: core; post-processing of the counters' outputs. It rescales counters by how many records
they were fed, a count that is public only under replacement neighbours, so the synthesizer
refuses it under add/remove (docs/privacy.md P12). (The counter shares of the default estimator,
:mod:`~dpsynth.tabular.shares`, divide by each counter's own noisy total instead.)
"""

from __future__ import annotations

import numpy as np

from dpsynth.tabular.counters import Counter
from dpsynth.tabular.model import ParticleModel


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
