"""Accuracy and throughput benchmarks of the online synthesizer (issue 3), run by ``dpsynth bench``.

Layer: adapter (may use numpy.random: it generates workloads, never privacy noise).

Every number is measured in one run and printed next to its baseline from the same run:
online paper-mode W1 against offline PMM at the same ε and n, and against the i.i.d. floor.
Metrics follow ``../shared/specs/accuracy-study.md`` §1.3: exact ℓ∞ W1 (POT) where n ≤ 5000,
otherwise exact ℓ∞ W1 on 4000-point subsamples (biased upwards; a sanity check only) and the
tree upper bound on the full sets (depth 20).
"""

from __future__ import annotations

import csv
import gzip
import math
import resource
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from dpsynth.eval import w1_exact, w1_tree_upper
from dpsynth.offline import pmm_synthesize
from dpsynth.synthesizer import OnlineSynthesizer

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
GOWALLA = SHARED_DATA / "gowalla_nyc" / "gowalla_events.csv.gz"


def load_gowalla(path: Path = GOWALLA) -> np.ndarray:
    """Gowalla NYC check-ins in time order (stable sort by time, then user), mapped to [0,1]^2.

    The box is the dataset's own filter box (its README): x = lon, y = lat.
    """
    rows = []
    with gzip.open(path, "rt") as handle:
        for user, ts, lat, lon, _ in csv.reader(handle, delimiter="\t"):
            rows.append((ts, int(user), float(lon), float(lat)))
    rows.sort(key=lambda r: (r[0], r[1]))
    xy = np.array([(r[2], r[3]) for r in rows])
    x = (xy[:, 0] + 74.2589) / 0.5585
    y = (xy[:, 1] - 40.4774) / 0.4402
    return np.clip(np.stack([x, y], axis=1), 0.0, 1.0)


def uniform_stream(n: int, d: int, seed: int) -> np.ndarray:
    """n i.i.d. uniform points in [0,1]^d."""
    return np.random.default_rng(seed).random((n, d))


def online_release_points(x: np.ndarray, epsilon: float, key: bytes, release_every: int) -> Any:
    """Run the paper-mode synthesizer over all of x; return the final release's points."""
    synth = OnlineSynthesizer(d=x.shape[1], epsilon=epsilon, key=key, release_every=release_every)
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
                pmm = pmm_synthesize(x, epsilon, key)
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


def throughput(
    records: int = 1_000_000, release_every: int = 10_000, repeats: int = 3
) -> dict[str, float]:
    """Ingest rate at d = 2, ε = 1 excluding release time; release materialisation; memory."""
    from dpsynth.noise import warm_up

    warm_up()
    rates, release_times, materialise = [], [], []
    state_bytes = 0
    for repeat in range(repeats):
        x = uniform_stream(records, 2, seed=repeat)
        synth = OnlineSynthesizer(d=2, epsilon=1.0, key=bytes(32), release_every=release_every)
        spent_in_release = 0.0
        original = synth._make_release

        def timed_release(original=original):  # type: ignore[no-untyped-def]
            nonlocal spent_in_release
            started = time.perf_counter()
            out = original()
            spent_in_release += time.perf_counter() - started
            return out

        synth._make_release = timed_release  # type: ignore[method-assign]
        started = time.perf_counter()
        for i in range(0, records, 100_000):
            synth.extend(x[i:i + 100_000])
        total = time.perf_counter() - started
        rates.append(records / (total - spent_in_release))
        release_times.append(spent_in_release / max(synth.sequence, 1))
        started = time.perf_counter()
        points = synth.release().points
        materialise.append(time.perf_counter() - started)
        assert len(points) == records
        cells = sum(level.n_cells for level in synth.levels)
        state_bytes = sum(level.nbytes for level in synth.levels) / cells
    return {
        "ingest_records_per_s": median(rates),
        "release_s": median(release_times),
        "materialise_s_per_1e6_points": median(materialise) * 1e6 / records,
        "state_bytes_per_cell": state_bytes,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
