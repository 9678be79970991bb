"""Workload error metrics of paper 003 §7.3 (evaluation only: they read the true data).

Layer: core, no randomness; never part of a release. Decisions (docs/tabular.md T7):
answers are **normalised** — q(f_t)/|f_t| and q(g_t)/|g_t| — which is what the paper's
magnitudes imply; RelWE averages |q(f_t) − q(g_t)| / q(f_t) over the cells with q(f_t) > 0
only (cells empty in the true data are undefined and skipped; the mean is over the non-empty
cells; a workload with none counts 0).

>>> from dpsynth.tabular.workloads import Workloads
>>> w = Workloads((2, 2))
>>> f, g = np.array([[0, 0], [1, 1]]), np.array([[0, 0], [0, 0]])
>>> summary = workload_metrics(w, f, g)
>>> [round(summary[k], 3) for k in ("AvgWE", "MaxWE", "AvgRelWE", "MaxRelWE")]
[0.25, 0.25, 1.0, 1.0]
"""

from __future__ import annotations

import numpy as np

from dpsynth.tabular.workloads import Workloads

METRICS = ("AvgWE", "MaxWE", "AvgRelWE", "MaxRelWE")


def workload_errors(
    workloads: Workloads, true: list[np.ndarray], synth: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """(WE, RelWE) per workload from raw tables; both sides normalised by their totals."""
    n_true = max(float(true[0].sum()), 1.0)
    n_syn = max(float(synth[0].sum()), 1.0)
    we = np.empty(len(workloads))
    rel = np.empty(len(workloads))
    for i, (a, b) in enumerate(zip(true, synth, strict=True)):
        fa, gb = a / n_true, b / n_syn
        diff = np.abs(fa - gb)
        we[i] = diff.mean()
        nz = fa > 0
        rel[i] = float((diff[nz] / fa[nz]).mean()) if nz.any() else 0.0
    return we, rel


def summarise(we: np.ndarray, rel: np.ndarray) -> dict[str, float]:
    """AvgWE, MaxWE, AvgRelWE, MaxRelWE over the workloads."""
    return {"AvgWE": float(we.mean()), "MaxWE": float(we.max()),
            "AvgRelWE": float(rel.mean()), "MaxRelWE": float(rel.max())}


def workload_metrics(workloads: Workloads, true_codes: np.ndarray,
                     synth_codes: np.ndarray) -> dict[str, float]:
    """The four metrics of §7.3 for one step, from true and synthetic records."""
    return summarise(*workload_errors(workloads, workloads.answers(true_codes),
                                      workloads.answers(synth_codes)))
