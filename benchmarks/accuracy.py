"""Accuracy and throughput benchmarks of the online synthesizer (issue 3), run by ``dpsynth bench``.

Layer: adapter (may use numpy.random: it generates workloads, never privacy noise).

Every number is measured in one run and printed next to its baseline from the same run:
online paper-mode W1 against offline PMM at the same ε and n, and against the i.i.d. floor.
Metrics follow docs/algorithms.md E.1: exact ℓ∞ W1 (POT) where n ≤ 5000,
otherwise exact ℓ∞ W1 on 4000-point subsamples (biased upwards; a sanity check only) and the
tree upper bound on the full sets (depth 20).

Also here, because they draw workloads or plot them: the generated stream of ``dpsynth run``
(:func:`drifting_blobs`), the W1 bracket and range-query errors of ``dpsynth run`` and
``dpsynth eval`` (:func:`w1_bracket`, :func:`range_query_errors`), and the tables and plots of
``dpsynth bench accuracy|rate|throughput``.
"""

from __future__ import annotations

import math
import resource
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from dpsynth.clock import level_of
from dpsynth.datasets import data_dir, gowalla_path, load_gowalla, uniform_stream
from dpsynth.eval import (
    w1_exact,
    w1_tree_upper,
)
from dpsynth.offline.pmm import pmm_synthesize
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.tree import route

SHARED_DATA = data_dir()
GOWALLA = gowalla_path()


def online_release_points(x: np.ndarray, epsilon: float, key: bytes, release_every: int) -> Any:
    """Run the paper-mode synthesizer over all of x; return the final release's points."""
    synth = OnlineSynthesizer(
        d=x.shape[1], epsilon=epsilon, key=key, release_every=release_every, mechanism="paper"
    )
    synth.extend(x)
    return synth.release().points


def w1_metrics(x: np.ndarray, y: np.ndarray, seed: int) -> dict[str, float]:
    """Exact ℓ∞ W1 (subsampled beyond 5000, flagged) and the tree upper bound."""
    exact = w1_exact(x, y, max_points=5000 if len(x) <= 5000 else 4000, seed=seed)
    return {
        "exact": exact.value,
        "exact_subsampled": float(exact.subsampled),
        "tree": w1_tree_upper(x, y, depth=20),
    }


def accuracy_table(
    sizes: tuple[int, ...] = (20_000, 100_000),
    seeds: int = 3,
    epsilon: float = 1.0,
    release_every: int = 500,
    datasets: dict[str, Callable[[int, int], np.ndarray]] | None = None,
) -> list[dict[str, Any]]:
    """Online (paper) vs offline PMM vs i.i.d. floor, d = 2, per dataset, size and seed."""
    if datasets is None:
        gowalla = load_gowalla() if GOWALLA.exists() else None
        datasets = {"uniform": lambda n, s: uniform_stream(n, 2, s)}
        if gowalla is not None:
            datasets["gowalla"] = lambda n, s: gowalla[:n]  # time order: one stream
    rows = []
    for name, make in datasets.items():
        for n in sizes:
            for seed in range(seeds):
                x = make(n, seed)
                key = (1000 + seed).to_bytes(32, "big")
                started = time.perf_counter()
                online = online_release_points(x, epsilon, key, release_every)
                online_s = time.perf_counter() - started
                pmm = pmm_synthesize(x, epsilon, key, size_hint=len(x))  # n public (anchors)
                if name == "uniform":
                    floor = uniform_stream(n, 2, 10_000 + seed)
                else:  # bootstrap resample: a slightly optimistic floor (shared atoms)
                    floor = x[np.random.default_rng(seed).integers(0, n, n)]
                row = {"data": name, "t": n, "seed": seed, "online_s": online_s}
                for label, y in (("online", online), ("pmm", pmm), ("floor", floor)):
                    for metric, value in w1_metrics(x, y, seed).items():
                        row[f"{label}_{metric}"] = value
                rows.append(row)
    return rows


RATE_NORMALISERS: dict[int, Callable[[int, float], float]] = {
    # W1 · normaliser stays bounded if the theorem's rate holds (Thm 5.1)
    1: lambda t, e: (e * t) / (math.log(e * t) ** 3 * math.log(t) ** 1.5),
    2: lambda t, e: math.sqrt(e * t) / math.log(t),
    3: lambda t, e: (e * t) ** (1 / 3) / math.log(t),
}


def rate_table(
    sizes: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000),
    dims: tuple[int, ...] = (1, 2, 3),
    epsilon: float = 1.0,
) -> list[dict[str, Any]]:
    """W1(t) and W1(t)·normaliser on uniform data, one run per (d, t), release_every = t/10."""
    rows = []
    for d in dims:
        for t in sizes:
            x = uniform_stream(t, d, seed=t + d)
            y = online_release_points(x, epsilon, bytes(range(32)), max(t // 10, 1))
            if d == 1:
                w1 = w1_exact(x, y).value  # exact sorted formula, no subsampling
                metric = "exact"
            else:
                w1 = w1_tree_upper(x, y, depth=20)
                metric = "tree"
            rows.append({"d": d, "t": t, "metric": metric, "w1": w1,
                         "normalised": w1 * RATE_NORMALISERS[d](t, epsilon)})
    return rows


#: The issue's benchmark goals (d = 2, ε = 1, a release every 10^4 records).
GOALS = {"ingest_records_per_s": 1e6, "release_1e6_points_s": 1.0, "state_bytes_per_cell": 64}


def touched_cells(x: np.ndarray, *, levels: int, max_depth: int = 20) -> list[int]:
    """Distinct cells of each tree level 1..levels that the records ``x`` fall in."""
    leaf = np.sort(route(x, depth=max_depth))
    return [int(np.unique(leaf >> np.uint64(max_depth - j)).size) for j in range(1, levels + 1)]


def _timed_ingest(synth: OnlineSynthesizer, x: np.ndarray) -> dict[str, float]:
    """Feed ``x`` in batches of 10^5; time releases, level-boundary ticks and the other ticks.

    A level-boundary tick ends a time level (every cell of every tree level then draws its
    end-of-level noise, a new threshold and a new firing time) or creates a tree level.
    """
    spent = {"release": 0.0, "boundary": 0.0, "steady": 0.0}
    ticks = {"boundary": 0, "steady": 0}
    make_release, end_tick = synth._make_release, synth._end_tick

    def timed_release():  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        out = make_release()
        spent["release"] += time.perf_counter() - started
        return out

    def timed_tick() -> None:
        cells_before, t = synth.n_cells, synth.t
        started = time.perf_counter()
        end_tick()
        kind = ("boundary" if synth.n_cells > cells_before
                or level_of(t + 1, synth.epsilon) != level_of(t, synth.epsilon) else "steady")
        spent[kind] += time.perf_counter() - started
        ticks[kind] += 1

    synth._make_release = timed_release  # type: ignore[method-assign]
    synth._end_tick = timed_tick  # type: ignore[method-assign]
    started = time.perf_counter()
    for i in range(0, len(x), 100_000):
        synth.extend(x[i:i + 100_000])
    total = time.perf_counter() - started
    return {"total_s": total, "release_s": spent["release"], "boundary_s": spent["boundary"],
            "steady_s": spent["steady"], "boundary_ticks": ticks["boundary"],
            "steady_ticks": ticks["steady"]}


def throughput(
    records: int = 1_000_000, release_every: int = 10_000, repeats: int = 3,
    schedule: str = "paper",
) -> dict[str, Any]:
    """Ingest rate at d = 2, ε = 1 excluding release time; release time; state per cell.

    Per repeat: a fresh synthesizer ingests ``records`` uniform points in batches of 10^5; the
    time spent inside releases (consistency, every ``release_every`` records) is subtracted;
    then the last release is materialised (its ``records`` points). Ingest time is also split
    into level-boundary ticks and the other ("steady") ticks. Medians over repeats.
    """
    from dpsynth.noise import warm_up

    warm_up()
    runs, materialise = [], []
    for repeat in range(repeats):
        x = uniform_stream(records, 2, seed=repeat)
        synth = OnlineSynthesizer(
            d=2, epsilon=1.0, key=bytes(32), release_every=release_every, mechanism=schedule
        )
        run = _timed_ingest(synth, x)
        run["ingest_records_per_s"] = records / (run["total_s"] - run["release_s"])
        run["steady_records_per_s"] = run["steady_ticks"] * release_every / run["steady_s"]
        run["release_each_s"] = run["release_s"] / max(synth.sequence, 1)
        runs.append(run)
        started = time.perf_counter()
        points = synth.release().points
        materialise.append(time.perf_counter() - started)
        assert len(points) == records
    cells = synth.n_cells
    touched = touched_cells(uniform_stream(release_every, 2, seed=99), levels=synth.depth)
    out: dict[str, Any] = {"records": records, "release_every": release_every,
                           "repeats": repeats, "runs": runs, "goals": GOALS,
                           "schedule": schedule}
    for name in ("ingest_records_per_s", "steady_records_per_s", "boundary_s", "steady_s",
                 "boundary_ticks", "steady_ticks"):
        out[name] = median(run[name] for run in runs)
    out["release_s"] = median(run["release_each_s"] for run in runs)
    out["materialise_s_per_1e6_points"] = median(materialise) * 1e6 / records
    out["release_1e6_points_s"] = out["release_s"] + out["materialise_s_per_1e6_points"]
    out["state_bytes_per_cell"] = synth.state_nbytes / cells
    out.update(cells=cells, levels=synth.depth, touched_cells_per_tick=sum(touched),
               touched_cells_per_level=touched)
    return out


def _peak_rss_mb() -> float:
    """Peak resident set of this process image (VmHWM: reset by exec, unlike ru_maxrss)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _peak_memory_child(records: int, release_every: int, schedule: str) -> dict[str, Any]:
    """Run in a fresh process: ingest ``records`` uniform points; report its peak RSS."""
    from dpsynth.noise import warm_up

    warm_up()
    baseline_mb = _peak_rss_mb()
    synth = OnlineSynthesizer(
        d=2, epsilon=1.0, key=bytes(32), release_every=release_every, mechanism=schedule
    )
    rng = np.random.default_rng(7)
    started = time.perf_counter()
    for i in range(0, records, 100_000):
        synth.extend(rng.random((min(100_000, records - i), 2)))
    elapsed = time.perf_counter() - started
    return {
        "t": synth.t, "releases": synth.sequence, "depth": synth.depth, "cells": synth.n_cells,
        "state_mb": synth.state_nbytes / 2**20,
        "baseline_rss_mb": baseline_mb,
        "peak_rss_mb": _peak_rss_mb(),
        "seconds": elapsed,
    }


def peak_memory(
    records: int = 10_000_000, release_every: int = 10_000, schedule: str = "paper"
) -> dict[str, Any]:
    """Peak resident memory of a whole run to t = ``records`` (d = 2, ε = 1), in a new process.

    The child generates its input in batches of 10^5 (never holding the stream), so its peak is
    the synthesizer's state, one batch and the interpreter with numpy and numba
    (``baseline_rss_mb``, measured before the synthesizer is built).
    """
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(_peak_memory_child, records, release_every, schedule).result()


# ---- reports -------------------------------------------------------------------------------

_METHODS = ("online", "pmm", "floor")
_METRICS = {"tree": "tree upper bound (full sets, depth 20)",
            "exact": "exact W1 (4000-point subsamples beyond 5000)"}


def summarise_accuracy(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (data, t, metric): medians over seeds and medians of the per-seed ratios."""
    out = []
    for data in dict.fromkeys(r["data"] for r in rows):
        for t in dict.fromkeys(r["t"] for r in rows if r["data"] == data):
            group = [r for r in rows if r["data"] == data and r["t"] == t]
            for metric in _METRICS:
                entry: dict[str, Any] = {"data": data, "t": t, "metric": metric,
                                         "seeds": len(group)}
                for m in _METHODS:
                    entry[m] = median(r[f"{m}_{metric}"] for r in group)
                for m in ("pmm", "floor"):
                    entry[f"online_over_{m}"] = median(
                        r[f"online_{metric}"] / r[f"{m}_{metric}"] for r in group)
                entry["subsampled"] = metric == "exact" and bool(
                    group[0]["online_exact_subsampled"])
                entry["online_s"] = median(r["online_s"] for r in group)
                out.append(entry)
    return out


def print_accuracy_report(rows: Sequence[dict[str, Any]], console: Console) -> None:
    """Rich table of :func:`summarise_accuracy`: medians and ratios online/PMM, online/floor."""
    summary = summarise_accuracy(rows)
    seeds = summary[0]["seeds"] if summary else 0
    table = Table(title=f"ℓ∞ W1 at d = 2, ε = 1 (median of {seeds} seeds)")
    for col in ("data", "t", "metric", "online", "PMM", "floor", "online÷PMM", "online÷floor",
                "online s"):
        table.add_column(col, justify="left" if col in ("data", "metric") else "right")
    for e in summary:
        metric = "tree" if e["metric"] == "tree" else (
            "exact (4000-sub)" if e["subsampled"] else "exact")
        table.add_row(e["data"], f"{e['t']:,}", metric, *(f"{e[m]:.4f}" for m in _METHODS),
                      f"{e['online_over_pmm']:.2f}×", f"{e['online_over_floor']:.2f}×",
                      f"{e['online_s']:.1f}")
    console.print(table)
    console.print("online = paper mode, ε = 1 under replacement; PMM = offline, pure ε = 1 under "
                  "add/remove; floor = i.i.d. resample. Ratios are medians of per-seed ratios.")


def print_rate_report(rows: Sequence[dict[str, Any]], console: Console) -> None:
    """Rich table of :func:`rate_table`."""
    table = Table(title="W1(t) and W1(t)·normaliser on uniform data (ε = 1, release every t/10)")
    for col in ("d", "t", "W1 metric", "W1(t)", "normaliser", "W1 · normaliser"):
        table.add_column(col, justify="right")
    names = {1: "εt / (ln³(εt)·ln^1.5 t)", 2: "(εt)^½ / ln t", 3: "(εt)^⅓ / ln t"}
    for r in rows:
        table.add_row(str(r["d"]), f"{r['t']:,}", r["metric"], f"{r['w1']:.5f}",
                      names[r["d"]], f"{r['normalised']:.3f}")
    console.print(table)


def print_throughput_report(result: dict[str, Any], console: Console) -> None:
    """Rich table of :func:`throughput` (and :func:`peak_memory`) against the issue's goals."""
    table = Table(title=(f"d = 2, ε = 1, release every {result['release_every']:,}: "
                         f"{result['records']:,} records, median of {result['repeats']}"))
    for col in ("measure", "value", "goal", "achieved ÷ goal"):
        table.add_column(col, justify="left" if col == "measure" else "right")
    rate, goal = result["ingest_records_per_s"], GOALS["ingest_records_per_s"]
    table.add_row("ingest, excluding release time", f"{rate:,.0f} records/s",
                  f"≥ {goal:,.0f} records/s", f"{rate / goal:.2f}")
    table.add_row(f"  {result['boundary_ticks']:.0f} level-boundary ticks",
                  f"{result['boundary_s']:.2f} s", "", "")
    table.add_row(f"  {result['steady_ticks']:.0f} other ticks", f"{result['steady_s']:.2f} s "
                  f"({result['steady_records_per_s']:,.0f} records/s)", "", "")
    release, release_goal = result["release_1e6_points_s"], GOALS["release_1e6_points_s"]
    table.add_row("release of 10^6 points (consistency + points)", f"{release:.3f} s",
                  f"≤ {release_goal:g} s", f"{release_goal / release:.2f}")
    table.add_row("  of which consistency, per release", f"{result['release_s'] * 1e3:.1f} ms",
                  "", "")
    table.add_row("  of which materialising 10^6 points",
                  f"{result['materialise_s_per_1e6_points']:.3f} s", "", "")
    state, state_goal = result["state_bytes_per_cell"], GOALS["state_bytes_per_cell"]
    table.add_row("in-memory state per cell", f"{state:.0f} bytes", f"≤ {state_goal} bytes",
                  f"{state_goal / state:.2f}")
    table.add_row("cells (levels 1..depth)", f"{result['cells']:,} ({result['levels']} levels)",
                  "", "")
    table.add_row(f"touched cells per tick of {result['release_every']:,} records",
                  f"{result['touched_cells_per_tick']:,}", "", "")
    peak = result.get("peak")
    if peak:
        table.add_row(f"peak RSS at t = {peak['t']:,}", f"{peak['peak_rss_mb']:,.0f} MB",
                      "(measure)", "")
        table.add_row("  of which interpreter + numpy + numba",
                      f"{peak['baseline_rss_mb']:,.0f} MB", "", "")
        table.add_row("  of which counter state",
                      f"{peak['state_mb']:,.0f} MB ({peak['cells']:,} cells)", "", "")
        table.add_row(f"  wall time to t = {peak['t']:,} (with releases)",
                      f"{peak['seconds']:.0f} s", "", "")
    console.print(table)
    console.print("achieved ÷ goal ≥ 1 means the goal is met.")


# ---- plots ---------------------------------------------------------------------------------


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def plot_accuracy(rows: Sequence[dict[str, Any]], out_dir: Path) -> Path:
    """W1 vs t per method (online, PMM, floor), one column per data set, one row per metric.

    Markers are medians over seeds; bars span the smallest to the largest seed.
    """
    datasets = list(dict.fromkeys(r["data"] for r in rows))
    fig = _figure(5.2 * len(datasets), 8)
    axes = np.atleast_2d(fig.subplots(2, len(datasets), squeeze=False))
    labels = {"online": "online (paper mode)", "pmm": "offline PMM", "floor": "i.i.d. floor"}
    for col, data in enumerate(datasets):
        for row, metric in enumerate(_METRICS):
            ax = axes[row, col]
            for method, marker in zip(_METHODS, "osv", strict=True):
                sizes = sorted({r["t"] for r in rows if r["data"] == data})
                values = [[r[f"{method}_{metric}"] for r in rows
                           if r["data"] == data and r["t"] == t] for t in sizes]
                mid = np.array([median(v) for v in values])
                err = np.array([mid - [min(v) for v in values], [max(v) for v in values] - mid])
                ax.errorbar(sizes, mid, yerr=err, marker=marker, capsize=3, label=labels[method])
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("t (records)")
            ax.set_ylabel("ℓ∞ W1")
            ax.set_title(f"{data}: {_METRICS[metric]}", fontsize=9)
            ax.legend(fontsize=8)
    fig.suptitle("W1 of the release vs the true prefix, d = 2, ε = 1 (median; bars: min–max "
                 "over seeds)", fontsize=10)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "accuracy-w1-vs-t.png"
    fig.savefig(path, dpi=110)
    return path


def plot_rate(rows: Sequence[dict[str, Any]], out_dir: Path) -> Path:
    """W1(t) and W1(t)·normaliser vs t, one line per d."""
    fig = _figure(11, 4.5)
    ax_w1, ax_norm = fig.subplots(1, 2)
    for d in sorted({r["d"] for r in rows}):
        sub = sorted((r for r in rows if r["d"] == d), key=lambda r: r["t"])
        ts = [r["t"] for r in sub]
        label = f"d = {d} ({sub[0]['metric']})"
        ax_w1.plot(ts, [r["w1"] for r in sub], marker="o", label=label)
        ax_norm.plot(ts, [r["normalised"] for r in sub], marker="o", label=label)
    for ax, title in ((ax_w1, "W1(t)"), (ax_norm, "W1(t) · rate normaliser (bounded if the "
                                                   "theorem's rate holds)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("t (records)")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle("Online synthesizer on uniform data, ε = 1, release every t/10", fontsize=10)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "rate-normalised.png"
    fig.savefig(path, dpi=110)
    return path
