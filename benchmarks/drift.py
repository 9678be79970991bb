"""Accuracy under drift (issue 14): every mechanism against offline PMM on stationary and
drifting streams, ``python -m benchmarks drift``.

Layer: adapter (generates workloads; all privacy noise comes from the keyed samplers).

Each cell of the table is a median over seeds (a seed is a noise key and, for generated
streams, a stream) of the final release at t: the ℓ∞ tree W1 upper bound (depth 20,
accuracy-study §1.3) and its ratio to offline PMM at the same ε and notion on the same prefix
(n public, ``size_hint = n`` under add/remove: the anchors' convention), the distance between
the release's mean and the prefix's mean (ℓ∞), and the online run's speed in records per second
(ingest and every release). Under add/remove the online run steps on public time: one step per
``release_every`` records, the paper's batch model.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from statistics import median

import numpy as np
from rich.console import Console
from rich.table import Table

from dpsynth.datasets import STREAMS
from dpsynth.eval import w1_tree_upper
from dpsynth.offline.pmm import pmm_synthesize
from dpsynth.online.synthesizer import OnlineSynthesizer

#: Streams of the panel: tuned on the first two, reported on all.
PANEL = ("uniform", "moving_blob", "rotating_ring", "regime_switch", "gowalla")
MECHANISMS = ("auto", "guided", "adaptive", "paper")


@dataclass(frozen=True)
class Case:
    """One run: a stream prefix, a mechanism, ε, a notion and a seed."""

    stream: str
    d: int
    t: int
    mechanism: str
    epsilon: float
    neighbours: str
    seed: int
    release_every: int = 500


def _key(seed: int, purpose: str) -> bytes:
    return (purpose.encode() + seed.to_bytes(4, "big")).ljust(32, b"\0")


def stream_prefix(case: Case) -> np.ndarray:
    """The first t records of the case's stream (generated streams depend on the seed)."""
    return STREAMS[case.stream](case.t, case.seed, d=case.d)


def online_release(case: Case, x: np.ndarray) -> tuple[np.ndarray, float]:
    """(final release's points, seconds of ingest and every release)."""
    synth = OnlineSynthesizer(case.d, case.epsilon, _key(case.seed, "online"),
                              case.release_every, mechanism=case.mechanism,
                              neighbours=case.neighbours)
    start = time.perf_counter()
    if case.neighbours == "replace":
        synth.extend(x)
    else:  # public time: a step after every batch of release_every records
        for lo in range(0, len(x), case.release_every):
            synth.add(x[lo:lo + case.release_every])
            synth.step()
    points = synth.release().points
    return points, time.perf_counter() - start


def measure(case: Case) -> dict[str, float]:
    """W1, ×PMM, mean error and speed of one case."""
    x = stream_prefix(case)
    y, seconds = online_release(case, x)
    pmm = pmm_synthesize(x, case.epsilon, _key(case.seed, "pmm"), neighbours=case.neighbours,
                         size_hint=len(x) if case.neighbours == "add_remove" else None)
    w1 = w1_tree_upper(x, y, depth=20) if len(y) else 1.0
    w1_pmm = w1_tree_upper(x, pmm, depth=20)
    mean_error = float(np.abs(y.mean(axis=0) - x.mean(axis=0)).max()) if len(y) else 1.0
    return {"w1": w1, "w1_pmm": w1_pmm, "mean_error": mean_error,
            "records_per_s": len(x) / seconds}


def run_cases(cases: list[Case], workers: int = 2) -> list[dict[str, float]]:
    """Measure cases in ``workers`` processes (spawned: no inherited state)."""
    if workers <= 1:
        return [measure(c) for c in cases]
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        return list(pool.map(measure, cases, chunksize=1))


def summarise(cases: list[Case], results: list[dict[str, float]]) -> list[dict[str, object]]:
    """Medians over seeds per (stream, d, t, mechanism, ε, notion)."""
    groups: dict[tuple[object, ...], list[dict[str, float]]] = {}
    for case, result in zip(cases, results, strict=True):
        key = (case.stream, case.d, case.t, case.mechanism, case.epsilon, case.neighbours)
        groups.setdefault(key, []).append(result)
    rows = []
    for (stream, d, t, mechanism, epsilon, neighbours), res in groups.items():
        w1 = median(r["w1"] for r in res)
        w1_pmm = median(r["w1_pmm"] for r in res)
        rows.append({"stream": stream, "d": d, "t": t, "mechanism": mechanism,
                     "epsilon": epsilon, "neighbours": neighbours, "w1": w1, "w1_pmm": w1_pmm,
                     "ratio": w1 / w1_pmm, "mean_error": median(r["mean_error"] for r in res),
                     "records_per_s": median(r["records_per_s"] for r in res),
                     "seeds": len(res)})
    return rows


def panel_cases(streams: tuple[str, ...], ds: tuple[int, ...], ts: tuple[int, ...],
                mechanisms: tuple[str, ...], epsilons: tuple[float, ...],
                notions: tuple[str, ...], seeds: int) -> list[Case]:
    """The grid, skipping what does not exist (Gowalla beyond d = 2, level mechanisms under
    add/remove)."""
    cases = []
    for stream in streams:
        for d in ds:
            if stream == "gowalla" and d > 2:
                continue
            for t in ts:
                for neighbours in notions:
                    for mechanism in mechanisms:
                        if neighbours == "add_remove" and mechanism == "paper":
                            continue
                        for epsilon in epsilons:
                            cases += [Case(stream, d, t, mechanism, epsilon, neighbours, s)
                                      for s in range(seeds)]
    return cases


def print_rows(rows: list[dict[str, object]], console: Console | None = None) -> None:
    """A rich table of :func:`summarise`'s rows."""
    table = Table(title="final release at t: tree W1 (median over seeds) and its ratio to "
                        "offline PMM at the same ε and notion")
    for name in ("stream", "d", "t", "notion", "mechanism", "ε", "W1", "PMM W1", "× PMM",
                 "|mean − true|∞", "records/s"):
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(str(r["stream"]), str(r["d"]), f"{r['t']:,}", str(r["neighbours"]),
                      str(r["mechanism"]), f"{r['epsilon']:g}", f"{r['w1']:.4f}",
                      f"{r['w1_pmm']:.4f}", f"{r['ratio']:.2f}", f"{r['mean_error']:.4f}",
                      f"{r['records_per_s']:,.0f}")
    (console or Console(width=160)).print(table)


def run_panel(cases: list[Case], json_path: Path | None = None,
              workers: int = 2) -> list[dict[str, object]]:
    """Measure, print and optionally save the panel."""
    rows = summarise(cases, run_cases(cases, workers))
    print_rows(rows)
    if json_path is not None:
        json_path.write_text(json.dumps({"rows": rows}, indent=1))
    return rows
