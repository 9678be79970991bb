"""Accuracy of the online mechanisms against offline PMM and the i.i.d. floor, one run.

Layer: adapter (workload generation may use numpy.random; never privacy noise).

Metrics as in docs/algorithms.md E.1: exact ℓ∞ W1 (POT) at t ≤ 5000 and the
tree upper bound (depth 20, full sets) beyond. Baselines measured in the same run: calibrated
offline PMM (add/remove ε), PMM-rep (offline PMM under replacement neighbours, i.e. at ε/2: the
fair comparator, since the online engine protects against replacement) and the i.i.d. floor
(a fresh uniform sample, or a bootstrap resample for real data).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from statistics import median
from typing import Any

import numpy as np

from benchmarks.accuracy import GOWALLA, load_gowalla, uniform_stream
from dpsynth.eval import w1_exact, w1_tree_upper
from dpsynth.offline.pmm import pmm_synthesize
from dpsynth.online.synthesizer import OnlineSynthesizer

ONLINE_MODES: dict[str, dict[str, Any]] = {
    "auto": {"mechanism": "auto"},
    "paper": {"mechanism": "paper"},
}
RELEASE_EVERY = 500


def w1(x: np.ndarray, y: np.ndarray) -> tuple[float, str]:
    """Exact ℓ∞ W1 for t ≤ 5000 (or any t when d = 1), else the tree upper bound at depth 20."""
    if len(x) <= 5000 or x.shape[1] == 1:
        return w1_exact(x, y, max_points=5000).value, "exact"
    return w1_tree_upper(x, y, depth=20), "tree"


def method_points(name: str, x: np.ndarray, key: bytes, epsilon: float) -> np.ndarray:
    """Synthetic points of one method for the prefix x."""
    if name in ONLINE_MODES:
        synth = OnlineSynthesizer(
            d=x.shape[1], epsilon=epsilon, key=key, release_every=RELEASE_EVERY,
            **ONLINE_MODES[name],
        )
        synth.extend(x)
        return synth.release().points
    if name == "pmm":
        return pmm_synthesize(x, epsilon, key, size_hint=len(x))  # n public, as the anchors
    if name == "pmm-rep":
        return pmm_synthesize(x, epsilon, key, neighbours="replace")
    raise ValueError(f"unknown method {name!r}")


def mode_rows(
    datasets: dict[str, Callable[[int, int, int], np.ndarray]],
    sizes: Iterable[int],
    seeds: int,
    dims: Iterable[int] = (2,),
    epsilon: float = 1.0,
    methods: Iterable[str] = ("auto", "paper", "pmm", "pmm-rep"),
) -> list[dict[str, Any]]:
    """One row per (data, d, t, seed, method): W1, its estimator, and the floor's W1."""
    rows = []
    for data, make in datasets.items():
        for d in dims:
            for t in sizes:
                for seed in range(seeds):
                    x = make(t, d, seed)
                    key = (5000 + seed).to_bytes(32, "big")
                    if data == "uniform":
                        floor = uniform_stream(t, d, 90_000 + seed)
                    else:
                        floor = x[np.random.default_rng(seed).integers(0, t, t)]
                    value, metric = w1(x, floor)
                    rows.append({"data": data, "d": d, "t": t, "seed": seed,
                                 "method": "floor", "w1": value, "metric": metric})
                    for method in methods:
                        value, metric = w1(x, method_points(method, x, key, epsilon))
                        rows.append({"data": data, "d": d, "t": t, "seed": seed,
                                     "method": method, "w1": value, "metric": metric})
    return rows


Dataset = Callable[[int, int, int], np.ndarray]


def default_datasets(include_gowalla: bool = True) -> dict[str, Dataset]:
    """Uniform data for any d; Gowalla NYC (time order, d = 2) when the shared data is present."""
    datasets: dict[str, Dataset] = {
        "uniform": lambda t, d, seed: uniform_stream(t, d, seed),
    }
    if include_gowalla and GOWALLA.exists():
        gowalla = load_gowalla()
        datasets["gowalla"] = lambda t, d, seed: gowalla[:t]  # one stream; seeds vary the key
    return datasets


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median W1 per (data, d, t, method) and its ratio to PMM and to PMM-rep."""
    groups: dict[tuple[Any, ...], list[float]] = {}
    metric: dict[tuple[Any, ...], str] = {}
    for row in rows:
        key = (row["data"], row["d"], row["t"], row["method"])
        groups.setdefault(key, []).append(row["w1"])
        metric[key] = row["metric"]
    out = []
    for (data, d, t, method), values in sorted(groups.items()):
        pmm = median(groups.get((data, d, t, "pmm"), [float("nan")]))
        rep = median(groups.get((data, d, t, "pmm-rep"), [float("nan")]))
        value = median(values)
        out.append({"data": data, "d": d, "t": t, "method": method,
                    "metric": metric[(data, d, t, method)], "w1_median": value,
                    "ratio_pmm": value / pmm, "ratio_pmm_rep": value / rep, "seeds": len(values)})
    return out


def print_summary(summary: list[dict[str, Any]], console: Any) -> None:
    """Rich table: median W1 and ratios to PMM and PMM-rep per (data, d, t, method)."""
    from rich.table import Table

    table = Table(title="W1 by schedule (median over seeds); ratio = method / baseline")
    for column in ("data", "d", "t", "method", "metric", "W1", "÷ PMM", "÷ PMM-rep"):
        table.add_column(column, justify="right" if column not in ("data", "method") else "left")
    for row in summary:
        table.add_row(row["data"], str(row["d"]), f"{row['t']:,}", row["method"], row["metric"],
                      f"{row['w1_median']:.4f}", f"{row['ratio_pmm']:.2f}",
                      f"{row['ratio_pmm_rep']:.2f}")
    console.print(table)


def plot_summary(summary: list[dict[str, Any]], out_dir: Any) -> Any:
    """Ratio to PMM vs t for each method, one panel per (data, d); returns the PNG path."""
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["data"], r["d"]) for r in summary})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (data, d) in zip(axes[0], panels, strict=True):
        for method in ("paper", "auto", "pmm-rep", "floor"):
            rows = [r for r in summary if (r["data"], r["d"], r["method"]) == (data, d, method)]
            if rows:
                ax.plot([r["t"] for r in rows], [r["ratio_pmm"] for r in rows], "o-", label=method)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set(xscale="log", yscale="log", title=f"{data}, d = {d}", xlabel="t",
               ylabel="W1 / W1(PMM)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path = Path(out_dir) / "modes-ratio-to-pmm.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
