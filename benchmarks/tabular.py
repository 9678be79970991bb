"""Reproduction benchmark of paper 003 on Adult: ``python -m benchmarks tabular`` (issue 7).

Layer: adapter (reads the shared data, times runs). Streams (docs/tabular.md T8): the Liu et al.
processed Adult (48,813 rows); *randomized* = a keyed permutation of the rows (seeded by
SHA-256 of the seed and the row index), *ordered* = rows sorted lexicographically in the CSV's
column order (age first); batches of B records, the last batch partial (977 steps at B = 50,
245 at B = 200). Metrics of §7.3 on normalised answers, averaged over the last 10 steps, for
the proposed method (Simple and unbounded Block counters) and the StreamingMWEM baseline.
"""

from __future__ import annotations

import csv
import hashlib
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.datasets import adult_dir
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.metrics import L1_METRICS, METRICS, step_metrics
from dpsynth.tabular.options import default_workloads_per_step
from dpsynth.tabular.synthesizer import TabularSynthesizer

ADULT_DIR = adult_dir()
#: name → (mechanism, counter, options). ``alg3`` is the proposed method as printed (EM selection,
#: Alg 3's m and r; the defaults before issue 17), run for the before/after comparison.
METHODS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "baseline": ("baseline", "simple", {}), "simple": ("proposed", "simple", {}),
    "block": ("proposed", "unbounded_block", {}),
    "alg3": ("proposed", "simple", {"selection": "em", "estimator": "alg3"})}
RESULT_COLUMNS = ("dataset", "epsilon", "method", "seed", "k", *METRICS, *L1_METRICS, "steps",
                  "sec_per_step", "peak_rss_mb", "snapshot_mb")

#: Paper 003 Tables 1–3, Adult rows: (dataset, ε) → metric → (baseline, proposed/simple, block).
PAPER: dict[tuple[str, float], dict[str, tuple[float, float, float | None]]] = {}


def _paper_rows() -> None:
    rows = {
        "Adult-randomized-bs-50": [
            (0.5, (0.5624, 0.3035, 0.3718), (0.0151, 0.0075, 0.0092), (3.6469, 1.7575, 1.9395),
             (0.1182, 0.0504, 0.0525)),
            (1.0, (0.4005, 0.3191, 0.2534), (0.0103, 0.0079, 0.0058), (2.3292, 1.8162, 1.5294),
             (0.0712, 0.0514, 0.0383)),
            (2.0, (0.351, 0.1863, 0.1862), (0.0085, 0.0039, 0.0039), (1.5646, 0.977, 0.9804),
             (0.0488, 0.0208, 0.0208)),
            (4.0, (0.2606, 0.1673, 0.1629), (0.0058, 0.0033, 0.0032), (0.9187, 0.9778, 0.9779),
             (0.0243, 0.0208, 0.0208))],
        "Adult-randomized-bs-200": [
            (0.5, (0.4113, 0.2658, None), (0.0104, 0.0064, None), (2.1987, 1.6246, None),
             (0.0698, 0.0419, None)),
            (1.0, (0.2786, 0.1975, None), (0.0065, 0.0044, None), (1.0789, 1.1166, None),
             (0.0323, 0.0249, None)),
            (2.0, (0.1802, 0.1802, None), (0.0036, 0.0036, None), (0.8907, 0.8907, None),
             (0.0191, 0.0191, None)),
            (4.0, (0.1802, 0.1802, None), (0.0036, 0.0036, None), (0.8907, 0.8907, None),
             (0.0191, 0.0191, None))],
        "Adult-ordered-bs-50": [
            (0.5, (0.5559, 0.3165, 0.3698), (0.0149, 0.008, 0.0093), (3.5589, 1.9028, 2.2472),
             (0.1157, 0.0497, 0.0572)),
            (1.0, (0.3953, 0.3214, 0.2552), (0.0102, 0.008, 0.0059), (2.2663, 1.9528, 1.3285),
             (0.0695, 0.0547, 0.0338)),
            (2.0, (0.3264, 0.1904, 0.1864), (0.0079, 0.004, 0.0039), (1.4234, 0.9798, 1.0114),
             (0.0444, 0.0208, 0.0208)),
            (4.0, (0.2402, 0.1667, 0.1632), (0.0053, 0.0033, 0.0032), (0.9192, 0.978, 0.978),
             (0.0211, 0.0208, 0.0208))],
        "Adult-ordered-bs-200": [
            (0.5, (0.381, 0.2593, None), (0.0096, 0.0063, None), (1.9203, 1.6522, None),
             (0.0601, 0.0413, None)),
            (1.0, (0.2608, 0.1972, None), (0.006, 0.0043, None), (1.006, 1.067, None),
             (0.0302, 0.0232, None)),
            (2.0, (0.1969, 0.1711, None), (0.0041, 0.0035, None), (0.7189, 0.9752, None),
             (0.0152, 0.0208, None)),
            (4.0, (0.1705, 0.1563, None), (0.0034, 0.0031, None), (0.8939, 0.9776, None),
             (0.019, 0.0208, None))],
    }
    for dataset, entries in rows.items():
        for eps, rel_avg, avg, rel_max, mx in entries:
            PAPER[(dataset, eps)] = {"AvgRelWE": rel_avg, "AvgWE": avg, "MaxRelWE": rel_max,
                                     "MaxWE": mx}


_paper_rows()


def auto_k(epsilon: float) -> int:
    """Workloads per step of the benchmark: the library's default (the paper does not state k;
    docs/tabular.md T3), :func:`dpsynth.tabular.options.default_workloads_per_step`."""
    return default_workloads_per_step(epsilon)


def bench_key(seed: int) -> bytes:
    """Public benchmark key of a seed (not secret: benchmarks only)."""
    return hashlib.sha256(f"dpsynth-bench-tabular:{seed}".encode()).digest()


def run_one(domain: Domain, stream: np.ndarray, batch: int, epsilon: float, method: str,
            seed: int, k: int, last: int = 10, max_steps: int | None = None,
            **options: Any) -> dict[str, Any]:
    """One stream through one synthesizer; metrics averaged over the last ``last`` steps."""
    algo, counter, preset = METHODS[method]
    synth = TabularSynthesizer(domain, epsilon, bench_key(seed), release_every=batch,
                               mechanism=algo, counter=counter, workloads_per_step=k,
                               **{**options, **preset})
    w = synth.workloads
    steps = -(-stream.shape[0] // batch)
    if max_steps is not None:
        steps = min(steps, max_steps)
    true_flat = np.zeros(int(w.offsets[-1]))
    rows: list[dict[str, float]] = []
    start = time.perf_counter()
    for t in range(steps):
        chunk = stream[t * batch:(t + 1) * batch]
        synth.add(chunk)  # a fixed batch is one public step of the paper's model
        release = synth.step()
        true_flat += w.answers_flat(w.flat_index(chunk))
        if t >= steps - last:
            rows.append(step_metrics(w, w.split(true_flat), w.answers(release.records)))
    elapsed = time.perf_counter() - start
    result: dict[str, Any] = {m: float(np.mean([r[m] for r in rows]))
                              for m in (*METRICS, *L1_METRICS)}
    result.update(steps=steps, sec_per_step=elapsed / steps,
                  peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  snapshot_mb=len(synth.snapshot()) / 2**20)
    return result


def summary_markdown(results: list[dict[str, Any]]) -> str:
    """Side-by-side table: paper (Base / Prop=Simple / Block) and ours (means over seeds).

    The paper prints one RelWE; its values stand beside both of our readings (``AvgRelWE``:
    per cell, ``AvgRelWE_L1``: ‖W(f)−W(g)‖₁/‖W(f)‖₁). ``ms/step`` rows: medians over the runs.
    """
    groups: dict[tuple[str, float, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["dataset"], float(r["epsilon"]), r["method"]), []).append(r)
    lines = ["| dataset | ε | metric | paper Base | ours Base | paper Prop (Simple) | "
             "ours Simple | paper Block | ours Block | ours Alg 3 as printed | "
             "seeds (Base/Simple/Block/Alg 3) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    cells = sorted({(d, e) for d, e, _ in groups})
    for dataset, eps in cells:
        paper = PAPER.get((dataset, eps), {})
        for metric in (*METRICS, *L1_METRICS, "ms/step"):
            ours, seeds = {}, []
            for method in METHODS:
                runs = [r for r in groups.get((dataset, eps, method), [])
                        if r.get(metric) not in (None, "") or metric == "ms/step"]
                ours[method] = _ours(runs, metric)
                seeds.append(str(len(runs)))
            base, prop, block = paper.get(metric.removesuffix("_L1"), (None, None, None))
            lines.append(f"| {dataset} | {eps:g} | {metric} | {_show(base)} | "
                         f"{ours['baseline']} | {_show(prop)} | {ours['simple']} | "
                         f"{_show(block)} | {ours['block']} | {ours['alg3']} | "
                         f"{'/'.join(seeds)} |")
    return "\n".join(lines) + "\n"


def _show(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def _ours(runs: list[dict[str, Any]], metric: str) -> str:
    if not runs:
        return "–"
    if metric == "ms/step":
        return f"{1000 * float(np.median([float(r['sec_per_step']) for r in runs])):.0f}"
    return f"{np.mean([float(r[metric]) for r in runs]):.4f}"


def read_results(out: Path) -> list[dict[str, Any]]:
    """Every row of every ``results-*.csv`` in ``out``."""
    rows: list[dict[str, Any]] = []
    for path in sorted(out.glob("results-*.csv")):
        with open(path, newline="", encoding="utf-8") as f:
            rows.extend(csv.DictReader(f))
    return rows


#: Before/after per-step time (issue 17): the runtime cases of docs/benchmarks.md, "Tabular
#: streams", each with the defaults before issue 17 (EM selection, Alg 3's m and r, k = 1 for
#: ε ≤ 1 else 4) and now.
SPEED_CASES = (("randomized-50", 1.0, "simple"), ("randomized-50", 4.0, "simple"),
               ("randomized-50", 4.0, "block"), ("randomized-200", 4.0, "simple"))


def _step_seconds(domain: Domain, stream: np.ndarray, batch: int, epsilon: float, method: str,
                  k: int, steps: int, preset: dict[str, Any]) -> float:
    """Median seconds of one step (add + step, no evaluation) over ``steps`` steps."""
    algo, counter, _ = METHODS[method]
    synth = TabularSynthesizer(domain, epsilon, bench_key(0), release_every=batch,
                               mechanism=algo, counter=counter, workloads_per_step=k, **preset)
    times = []
    for t in range(steps):
        chunk = stream[t * batch:(t + 1) * batch]
        start = time.perf_counter()
        synth.add(chunk)
        synth.step()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def speed_rows(domain: Domain, streams: dict[str, np.ndarray], *, steps: int = 200,
               repeats: int = 3) -> list[dict[str, Any]]:
    """Per case: median ms/step before and after (alternating, ``repeats`` times each, in one
    process after a warm-up) and the ratio after/before."""
    before = {"selection": "em", "estimator": "alg3"}
    rows = []
    _step_seconds(domain, streams["randomized"], 50, 1.0, "simple", 1, 20, {})  # warm numba
    for dataset, eps, method in SPEED_CASES:
        kind, batch = dataset.split("-")
        stream = streams[kind]
        old_k, new_k = (1 if eps <= 1.0 else 4), auto_k(eps)  # auto_k before issue 17, now
        olds, news = [], []
        for _ in range(repeats):
            olds.append(_step_seconds(domain, stream, int(batch), eps, method, old_k, steps,
                                      before))
            news.append(_step_seconds(domain, stream, int(batch), eps, method, new_k, steps, {}))
        old, new = float(np.median(olds)), float(np.median(news))
        rows.append({"dataset": dataset, "epsilon": eps, "method": method, "k_before": old_k,
                     "k_after": new_k, "ms_before": 1000 * old, "ms_after": 1000 * new,
                     "ratio": new / old})
    return rows
