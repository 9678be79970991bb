"""Workload error metrics of paper 003 §7.3 (evaluation only: they read the true data).

Layer: core, no randomness; never part of a release. Decisions (docs/tabular.md T12):
answers are **normalised** — q(f_t)/|f_t| and q(g_t)/|g_t| — which is what the paper's
magnitudes imply; RelWE averages |q(f_t) − q(g_t)| / q(f_t) over the cells with q(f_t) > 0
only (the printed per-cell formula; cells empty in the true data are undefined and skipped; a
workload with none counts 0). The **workload-level reading** RelWE_L1 = ‖W(f_t) − W(g_t)‖₁ /
‖W(f_t)‖₁ on raw counts (:func:`relative_l1`) is the one whose magnitudes match the paper's
tables (docs/tabular.md "AvgRelWE: two readings"); both are reported.

>>> from dpsynth.tabular.workloads import Workloads
>>> w = Workloads((2, 2))
>>> f, g = np.array([[0, 0], [1, 1]]), np.array([[0, 0], [0, 0]])
>>> summary = workload_metrics(w, f, g)
>>> [round(summary[k], 3) for k in (*METRICS, *L1_METRICS)]
[0.25, 0.25, 1.0, 1.0, 1.0, 1.0]
"""

from __future__ import annotations

import numpy as np

from dpsynth.tabular.workloads import Workloads

METRICS = ("AvgWE", "MaxWE", "AvgRelWE", "MaxRelWE")
#: The workload-level reading of RelWE (:func:`relative_l1`), reported beside METRICS.
L1_METRICS = ("AvgRelWE_L1", "MaxRelWE_L1")


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


def relative_l1(true: list[np.ndarray], synth: list[np.ndarray]) -> np.ndarray:
    """‖W(f) − W(g)‖₁ / ‖W(f)‖₁ per workload, on raw counts (0 where f is empty)."""
    return np.array([np.abs(a - b).sum() / a.sum() if a.sum() > 0 else 0.0
                     for a, b in zip(true, synth, strict=True)])


def summarise(we: np.ndarray, rel: np.ndarray,
              rel_l1: np.ndarray | None = None) -> dict[str, float]:
    """AvgWE, MaxWE, AvgRelWE, MaxRelWE over the workloads (and the L1 reading if given)."""
    out = {"AvgWE": float(we.mean()), "MaxWE": float(we.max()),
           "AvgRelWE": float(rel.mean()), "MaxRelWE": float(rel.max())}
    if rel_l1 is not None:
        out.update(AvgRelWE_L1=float(rel_l1.mean()), MaxRelWE_L1=float(rel_l1.max()))
    return out


def step_metrics(workloads: Workloads, true: list[np.ndarray],
                 synth: list[np.ndarray]) -> dict[str, float]:
    """METRICS and L1_METRICS of one step from true and synthetic workload answers."""
    return summarise(*workload_errors(workloads, true, synth), relative_l1(true, synth))


def workload_metrics(workloads: Workloads, true_codes: np.ndarray,
                     synth_codes: np.ndarray) -> dict[str, float]:
    """The metrics of §7.3 (both RelWE readings) for one step, from true and synthetic
    records."""
    return step_metrics(workloads, workloads.answers(true_codes),
                        workloads.answers(synth_codes))
