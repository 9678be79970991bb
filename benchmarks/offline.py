"""Offline mechanisms (issue 6): accuracy and cost of PMM, PSMM and low-dimensional synthesis.

Layer: adapter (workload generation may use numpy.random; never privacy noise: every method
draws its noise from a key derived from the seed).

``dpsynth bench offline`` runs parts A and B, ``dpsynth bench offline-cost`` part C (each under
ten minutes on a loaded 2-core machine):

A. lowdim vs PMM in full dimension vs the rate of Thm 4.1, on points near a 2-plane in
   d = 10 and on the six continuous columns of UCI Adult (d = 6, fixed public bounds), n ≤ 5000
   (exact ℓ∞ W1, POT), ε = 1, replacement neighbours for both (PMM at ε/2 per cell, C.9).
   Rate(d′) = √(Σ_{i>d′} λ_i(M)) + √(d′ d^2.5/(εn)) + √(d/d′)(εn)^(−1/d′) with constant 1.
B. PSMM vs PMM in d = 2, 3 (add/remove, the Chapter 3 notion), n ≤ 5000, exact W1.
C. Wall time of one run of each method at n = 10^3, 10^4, 10^5, each in a fresh process, and
   its memory: the peak of Python/numpy allocations (tracemalloc, a second run) and the
   process's peak RSS minus its RSS just before the run (catches HiGHS's C++ allocations; an
   upper bound, since the peak may predate the run).
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from functools import cache
from statistics import median
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.accuracy import SHARED_DATA
from dpsynth.eval import w1_exact
from dpsynth.offline.lowdim import lowdim_release
from dpsynth.offline.pmm import pmm_synthesize
from dpsynth.offline.psmm import psmm_synthesize

ADULT = SHARED_DATA / "adult_uci_raw" / "adult.data"
#: Adult's continuous columns (0-based field index) and fixed public bounds.
ADULT_COLUMNS = {"age": (0, 17, 90), "fnlwgt": (2, 0, 1_500_000), "education-num": (4, 1, 16),
                 "capital-gain": (10, 0, 99_999), "capital-loss": (11, 0, 4_356),
                 "hours-per-week": (12, 1, 99)}
EPSILON = 1.0
SIZES = (1000, 2000, 5000)
COST_SIZES = (1000, 10_000, 100_000)


def bench_key(seed: int) -> bytes:
    """The noise key of one seed (benchmark only; public)."""
    return hashlib.sha256(f"dpsynth-bench-offline-{seed}".encode()).digest()


def near_plane(n: int, seed: int, d: int = 10, jitter: float = 0.01) -> np.ndarray:
    """n points near a random 2-plane through the centre of [0,1]^d (Gaussian jitter)."""
    rng = np.random.default_rng(seed)
    basis = np.linalg.qr(np.random.default_rng(12345).normal(size=(d, 2)))[0] * 0.35
    plane = 0.5 + (rng.random((n, 2)) - 0.5) @ basis.T
    return np.clip(plane + rng.normal(0, jitter, (n, d)), 0, 1)


@cache
def load_adult() -> np.ndarray:
    """Adult's continuous columns scaled to [0,1] by the fixed bounds (32,561 rows)."""
    rows = []
    for line in ADULT.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 13:
            rows.append([(float(parts[i]) - lo) / (hi - lo) for i, lo, hi in
                         ADULT_COLUMNS.values()])
    return np.clip(np.array(rows), 0, 1)


def adult_sample(n: int, seed: int) -> np.ndarray:
    """n rows of Adult drawn without replacement (public benchmark randomness)."""
    data = load_adult()
    return data[np.random.default_rng(seed).choice(len(data), n, replace=False)]


def mixture(n: int, seed: int, d: int) -> np.ndarray:
    """Three Gaussian blobs in [0,1]^d (clipped)."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(7).random((3, d)) * 0.6 + 0.2
    return np.clip(centres[rng.integers(0, 3, n)] + rng.normal(0, 0.08, (n, d)), 0, 1)


def thm41_rate(x: np.ndarray, target_dim: int, epsilon: float) -> float:
    """Right-hand side of (4.2) with constant 1, from the true covariance (4.1)."""
    n, d = x.shape
    lam = np.sort(np.linalg.eigvalsh(np.cov(x, rowvar=False)))[::-1]
    en = epsilon * n
    k = target_dim
    return (math.sqrt(max(float(lam[k:].sum()), 0.0)) + math.sqrt(k * d**2.5 / en)
            + math.sqrt(d / k) * en ** (-1 / k))


def _w1(x: np.ndarray, y: np.ndarray) -> float:
    return w1_exact(x, y, max_points=max(len(x), len(y))).value


def lowdim_rows(seeds: int) -> list[dict[str, Any]]:
    """Part A: one row per (data set, n, seed, method)."""
    datasets: dict[str, Callable[[int, int], np.ndarray]] = {"plane d=10": near_plane}
    if ADULT.is_file():
        datasets["adult d=6"] = adult_sample
    rows = []
    for name, make in datasets.items():
        for n in SIZES:
            for seed in range(seeds):
                x, key = make(n, seed), bench_key(seed)
                res = lowdim_release(x, EPSILON, key)
                paper = lowdim_release(x, EPSILON, key, region="paper")
                methods = {"lowdim": res.points, "lowdim-paper-cube": paper.points,
                           "pmm-full-d": pmm_synthesize(x, EPSILON, key, neighbours="replace")}
                rate = thm41_rate(x, res.target_dim, EPSILON)
                for method, y in methods.items():
                    rows.append({"part": "A", "data": name, "n": n, "seed": seed,
                                 "method": method, "w1": _w1(x, y), "m": len(y),
                                 "target_dim": res.target_dim, "rate": rate})
    return rows


def psmm_rows(seeds: int) -> list[dict[str, Any]]:
    """Part B: PSMM vs PMM (add/remove) on a Gaussian mixture in d = 2, 3."""
    rows = []
    for d in (2, 3):
        for n in SIZES:
            for seed in range(seeds):
                x, key = mixture(n, seed, d), bench_key(seed)
                for method, fn in (("psmm", psmm_synthesize), ("pmm", pmm_synthesize)):
                    start = time.perf_counter()
                    y = fn(x, EPSILON, key, size_hint=n)  # n public, as the anchors
                    seconds = time.perf_counter() - start
                    rows.append({"part": "B", "data": f"mixture d={d}", "n": n, "seed": seed,
                                 "method": method, "w1": _w1(x, y), "m": len(y),
                                 "seconds": seconds})
    return rows


_COST_SCRIPT = """
import json, resource, sys, time, tracemalloc
import numpy as np
from benchmarks.offline import bench_key, mixture, near_plane
from dpsynth.offline.lowdim import lowdim_synthesize
from dpsynth.noise import warm_up
from dpsynth.offline.pmm import pmm_synthesize
from dpsynth.offline.psmm import psmm_synthesize
method, d, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
x = near_plane(n, 0, d) if method.startswith("lowdim") or d > 3 else mixture(n, 0, d)
warm_up()
fn = {"pmm": pmm_synthesize, "psmm": psmm_synthesize, "lowdim": lowdim_synthesize}[method]
with open("/proc/self/statm") as f:
    base = int(f.read().split()[1]) * resource.getpagesize() / 1024  # current RSS, KiB
start = time.perf_counter()
y = fn(x, 1.0, bench_key(0))
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()
fn(x, 1.0, bench_key(0))
py_peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"seconds": seconds, "rss_mib": (peak - base) / 1024,
                  "py_peak_mib": py_peak / 2**20, "m": len(y)}))
"""


def cost_rows() -> list[dict[str, Any]]:
    """Part C: one fresh process per (method, d, n)."""
    rows = []
    for method, d in (("pmm", 2), ("psmm", 2), ("psmm", 3), ("pmm", 10), ("lowdim", 10)):
        for n in COST_SIZES:
            out = subprocess.run([sys.executable, "-c", _COST_SCRIPT, method, str(d), str(n)],
                                 capture_output=True, text=True, check=True)
            rows.append({"part": "C", "method": method, "d": d, "n": n,
                         **json.loads(out.stdout.strip().splitlines()[-1])})
    return rows


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians over seeds per (part, data, n, method), with ratios to the same-run baseline."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        if row["part"] in ("A", "B"):
            groups.setdefault((row["part"], row["data"], row["n"], row["method"]), []).append(row)
    out = []
    for (part, data, n, method), group in groups.items():
        base = "pmm-full-d" if part == "A" else "pmm"
        base_w1 = median(r["w1"] for r in rows if r["part"] == part and r["data"] == data
                         and r["n"] == n and r["method"] == base)
        w1 = median(r["w1"] for r in group)
        entry = {"part": part, "data": data, "n": n, "method": method, "w1": w1,
                 "ratio_to_pmm": w1 / base_w1, "m": median(r["m"] for r in group)}
        if part == "A":
            entry["rate"] = median(r["rate"] for r in group)
            entry["w1_over_rate"] = w1 / entry["rate"]
            entry["target_dim"] = median(r["target_dim"] for r in group)
        else:
            entry["seconds"] = median(r["seconds"] for r in group)
        out.append(entry)
    return out


def print_report(summary: list[dict[str, Any]], costs: list[dict[str, Any]],
                 console: Console) -> None:
    """Tables of medians and ratios (parts A, B) and of costs (part C); empty parts skipped."""
    if summary:
        table = Table(title="offline accuracy: median exact ℓ∞ W1 over seeds (ε = 1)")
        for col in ("part", "data", "n", "method", "W1", "÷ PMM", "W1 ÷ rate", "d′", "m"):
            table.add_column(col)
        for e in summary:
            table.add_row(e["part"], e["data"], str(e["n"]), e["method"], f"{e['w1']:.4f}",
                          f"{e['ratio_to_pmm']:.2f}",
                          f"{e['w1_over_rate']:.3f}" if "w1_over_rate" in e else "",
                          f"{e['target_dim']:g}" if "target_dim" in e else "", f"{e['m']:g}")
        console.print(table)
    if costs:
        cost = Table(title="cost of one run (fresh process; ΔRSS = peak minus RSS before)")
        for col in ("method", "d", "n", "seconds", "numpy peak MiB", "ΔRSS MiB", "m"):
            cost.add_column(col)
        for r in costs:
            cost.add_row(r["method"], str(r["d"]), f"{r['n']:,}", f"{r['seconds']:.2f}",
                         f"{r['py_peak_mib']:.1f}", f"{r['rss_mib']:.0f}", f"{r['m']:,}")
        console.print(cost)


def run(console: Console, seeds: int, with_cost: bool = False) -> dict[str, Any]:
    """Parts A and B (and C if ``with_cost``); returns raw rows, the summary and the costs."""
    with console.status(f"offline A: lowdim vs PMM, n ≤ 5000, {seeds} seeds…"):
        rows = lowdim_rows(seeds)
    with console.status(f"offline B: PSMM vs PMM, d = 2, 3, {seeds} seeds…"):
        rows += psmm_rows(seeds)
    costs = []
    if with_cost:
        with console.status("offline C: runtime and memory at n = 10^3, 10^4, 10^5…"):
            costs = cost_rows()
    summary = summarise(rows)
    print_report(summary, costs, console)
    return {"rows": rows, "summary": summary, "costs": costs}


def run_cost(console: Console) -> dict[str, Any]:
    """Part C only: runtime and memory at n = 10^3, 10^4, 10^5."""
    with console.status("offline C: runtime and memory at n = 10^3, 10^4, 10^5…"):
        costs = cost_rows()
    print_report([], costs, console)
    return {"costs": costs}
