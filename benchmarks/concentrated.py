"""The concentrated panel (issue 31): the default against offline PMM and PHDStream,
``python -m benchmarks concentrated``.

Layer: adapter (workloads and a peer baseline; the product's noise comes from its keyed samplers).

Streams: :mod:`benchmarks.concentrated_streams` (tuning and held-out). One online run per
(stream, method, ε, notion, key) releases every 500 records (under add/remove a public step per
500 records); at each t of the grid the release is scored against the prefix: ℓ∞ tree W1 at
depth 20 (accuracy-study §1.3), exact ℓ∞ W1 (POT) at t = 4000, the release mean minus the
prefix mean per coordinate (the bias), the share of released points farther than 0.01 (ℓ∞)
from every true point, and the released size. Baselines on the same prefix and key index:
offline PMM at the same ε and notion (``size_hint = t`` under add/remove, the anchors'
convention, which favours PMM) and the clean-room PHDStream (:mod:`benchmarks.phdstream`,
sensitivity 1 under add/remove and 2 under replacement).

Summary per (stream, t, ε, notion): mean W1 over keys per method, the ratio of means to PMM and
to PHDStream, and the one-sided paired t-test on log(ours/theirs) per key (H1: ours worse;
p < 0.05 rejects "at or below").
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.concentrated_streams import HELD_OUT, PANEL, TUNING
from benchmarks.phdstream import phdstream_releases
from dpsynth.eval import w1_exact, w1_tree_upper
from dpsynth.offline.pmm import pmm_synthesize
from dpsynth.online.synthesizer import OnlineSynthesizer

SIZES = (4000, 6000, 8000, 10000, 14000, 20000)
EXACT_AT = 4000
STEP = 500
STRAY = 0.01


@dataclass(frozen=True)
class Job:
    """One run: a stream, a method (a dpsynth mechanism, ``pmm`` or ``phdstream``), ε, a
    notion, a key index and the t at which releases are scored."""

    stream: str
    method: str
    epsilon: float
    neighbours: str
    key: int
    sizes: tuple[int, ...]
    score_exact: bool = True


def _key(index: int, purpose: str) -> bytes:
    return (purpose.encode() + index.to_bytes(4, "big")).ljust(32, b"\0")


def _online(x: np.ndarray, job: Job) -> dict[int, np.ndarray]:
    synth = OnlineSynthesizer(2, job.epsilon, _key(job.key, "online"), STEP,
                              mechanism=job.method, neighbours=job.neighbours)
    out = {}
    for start in range(0, len(x), STEP):
        if job.neighbours == "add_remove":  # public time: a step per batch
            synth.add(x[start:start + STEP])
            releases = [synth.step()]
        else:
            releases = synth.extend(x[start:start + STEP])
        t = start + min(STEP, len(x) - start)
        if t in job.sizes and releases:
            out[t] = releases[-1].points
    return out


def releases(x: np.ndarray, job: Job) -> dict[int, np.ndarray]:
    """The points ``job``'s method releases at each of its t (offline PMM on each prefix; the
    references' conventions: PMM's ``size_hint = t`` and PHDStream's sensitivity 1 under
    add/remove, none and 2 under replacement)."""
    if job.method == "pmm":
        return {t: pmm_synthesize(x[:t], job.epsilon, _key(job.key, "pmm"),
                                  neighbours=job.neighbours,
                                  size_hint=t if job.neighbours == "add_remove" else None)
                for t in job.sizes}
    if job.method == "phdstream":
        return phdstream_releases(x, job.epsilon, job.sizes, seed=job.key, step=STEP,
                                  sensitivity=1 if job.neighbours == "add_remove" else 2)
    return _online(x, job)


def stray_share(x: np.ndarray, y: np.ndarray, radius: float = STRAY) -> float:
    """The share of ``y`` farther than ``radius`` (ℓ∞) from every point of ``x``."""
    from scipy.spatial import cKDTree

    if len(y) == 0:
        return 0.0
    distance, _ = cKDTree(np.unique(x, axis=0)).query(y, k=1, p=np.inf,
                                                      distance_upper_bound=radius)
    return float(np.mean(~np.isfinite(distance)))


def run_job(job: Job) -> list[dict[str, Any]]:
    """Score the job's releases at each t (module docstring)."""
    x = PANEL[job.stream](max(job.sizes))
    sizes = tuple(t for t in job.sizes if t <= len(x))
    job = Job(**{**asdict(job), "sizes": sizes})
    began = time.perf_counter()
    released = releases(x, job)
    seconds = time.perf_counter() - began
    rows = []
    for t, y in sorted(released.items()):
        prefix = x[:t]
        row = {**asdict(job), "t": t, "size": len(y), "seconds": seconds,
               "tree": w1_tree_upper(prefix, y, depth=20) if len(y) else 1.0,
               "bias": (y.mean(axis=0) - prefix.mean(axis=0)).tolist() if len(y) else [0, 0],
               "stray": stray_share(prefix, y)}
        if job.score_exact and t == EXACT_AT and len(y):
            row["exact"] = w1_exact(prefix, y, max_points=5000).value
        del row["sizes"]
        rows.append(row)
    return rows


def panel_jobs(streams: tuple[str, ...], methods: tuple[str, ...], epsilons: tuple[float, ...],
               notions: tuple[str, ...], keys: int, sizes: tuple[int, ...] = SIZES,
               exact: bool = True) -> list[Job]:
    """The grid of jobs, largest streams first (the pool then balances)."""
    return [Job(s, m, e, n, k, sizes, exact) for s in streams for e in epsilons for n in notions
            for m in methods for k in range(keys)]


def run_jobs(jobs: list[Job], workers: int = 1,
             progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Every job's rows, in ``workers`` spawned processes."""
    rows: list[dict[str, Any]] = []
    if workers <= 1:
        for i, job in enumerate(jobs):
            rows += run_job(job)
            if progress:
                progress(i + 1, len(jobs))
        return rows
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        for i, result in enumerate(pool.map(run_job, jobs, chunksize=1)):
            rows += result
            if progress:
                progress(i + 1, len(jobs))
    return rows


def _paired_p(ours: list[float], theirs: list[float]) -> float:
    """One-sided paired t-test on log(ours/theirs): p of 'ours is no worse' (small: worse)."""
    from scipy.stats import ttest_1samp

    diff = np.log(np.asarray(ours)) - np.log(np.asarray(theirs))
    if diff.size < 2 or np.allclose(diff, diff[0]):
        return 0.0 if diff.mean() > 0 else 1.0
    return float(ttest_1samp(diff, 0.0, alternative="greater").pvalue)


def summarise(rows: list[dict[str, Any]], ours: str = "auto",
              metric: str = "tree") -> list[dict[str, Any]]:
    """Per (stream, t, ε, notion): mean W1 per method over keys, ratios and paired p-values."""
    groups: dict[tuple[Any, ...], dict[str, dict[int, float]]] = {}
    for r in rows:
        if metric in r:
            key = (r["stream"], r["t"], r["epsilon"], r["neighbours"])
            groups.setdefault(key, {}).setdefault(r["method"], {})[r["key"]] = r[metric]
    out = []
    for (stream, t, eps, notion), by in sorted(groups.items()):
        if ours not in by:
            continue
        row: dict[str, Any] = {"stream": stream, "t": t, "epsilon": eps, "neighbours": notion,
                               "held_out": stream in HELD_OUT, ours: _mean(by[ours])}
        for base in ("pmm", "phdstream"):
            if base in by:
                keys = sorted(set(by[ours]) & set(by[base]))
                row[base] = _mean(by[base])
                row[f"ratio_{base}"] = row[ours] / row[base]
                row[f"p_{base}"] = _paired_p([by[ours][k] for k in keys],
                                             [by[base][k] for k in keys])
        out.append(row)
    return out


def _mean(values: dict[int, float]) -> float:
    return float(np.mean(list(values.values())))


def bias_table(rows: list[dict[str, Any]], t: int | None = None) -> list[dict[str, Any]]:
    """Per (stream, ε, notion, method) at t (default: each stream's largest): the bias of each
    coordinate per key, its mean, t-statistic and whether every key has the same sign."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    last = {}
    for r in rows:
        last[r["stream"]] = max(last.get(r["stream"], 0), r["t"])
    for r in rows:
        if r["t"] == (t or last[r["stream"]]):
            groups.setdefault((r["stream"], r["t"], r["epsilon"], r["neighbours"], r["method"]),
                              []).append(r)
    out = []
    for (stream, tt, eps, notion, method), members in sorted(groups.items()):
        bias = np.array([m["bias"] for m in members])  # keys × coordinates
        sd = bias.std(axis=0, ddof=1) if len(members) > 1 else np.full(2, np.nan)
        out.append({"stream": stream, "t": tt, "epsilon": eps, "neighbours": notion,
                    "method": method, "mean": bias.mean(axis=0).tolist(),
                    "tstat": (bias.mean(axis=0) / (sd / math.sqrt(len(members)))).tolist(),
                    "same_sign": [bool((bias[:, j] > 0).all() or (bias[:, j] < 0).all())
                                  for j in range(bias.shape[1])],
                    "keys": len(members)})
    return out


def markdown(summary: list[dict[str, Any]], ours: str = "auto", metric: str = "tree") -> str:
    """A markdown table of :func:`summarise`'s rows."""
    lines = [f"| stream | t | ε | notion | {ours} | PMM | ÷ PMM (p) | PHDStream | ÷ PHD (p) |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in summary:
        cells = [r["stream"] + ("" if r["held_out"] else " (tuning)"), f"{r['t']:,}",
                 f"{r['epsilon']:g}", r["neighbours"], f"{r[ours]:.4g}"]
        for base in ("pmm", "phdstream"):
            if base in r:
                flag = "**" if r[f"ratio_{base}"] > 1 and r[f"p_{base}"] < 0.05 else ""
                cells += [f"{r[base]:.4g}",
                          f"{flag}{r[f'ratio_{base}']:.2f}{flag} ({r[f'p_{base}']:.2f})"]
            else:
                cells += ["", ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def save(rows: list[dict[str, Any]], path: Path) -> None:
    """Raw rows as JSON."""
    path.write_text(json.dumps({"rows": rows}, indent=0))


def load(path: Path) -> list[dict[str, Any]]:
    """Rows saved by :func:`save`."""
    return list(json.loads(path.read_text())["rows"])


__all__ = ["HELD_OUT", "PANEL", "TUNING", "Job", "bias_table", "load", "markdown", "panel_jobs",
           "run_job", "run_jobs", "save", "stray_share", "summarise"]
