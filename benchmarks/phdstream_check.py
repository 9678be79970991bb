"""The clean-room PHDStream against releases of the public code on the same streams.

Layer: adapter. ``python -m benchmarks.phdstream_check FOLDER`` reads the releases that the
public code (k-girish/phdstream, run by hand from a folder outside the repository, never
imported here) saved as ``res_<stream>_e<ε>_s<seed>.npz`` (arrays named by t, points in
[0,1]^2; add/remove, simple counters, batches of 500, no initialisation, max depth 20) and the
streams it read as ``data/<stream>.npy``; runs :mod:`benchmarks.phdstream` on the same streams
with as many seeds; prints, per (stream, ε, t), both means over seeds of the tree W1 (depth 20),
the exact W1 at t = 4000 and the released size, their ratio and Welch's two-sided p-value.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.stats import ttest_ind

from benchmarks.phdstream import phdstream_releases
from dpsynth.eval import w1_exact, w1_tree_upper

NAME = re.compile(r"res_(?P<stream>.+)_e(?P<eps>[0-9.]+)_s(?P<seed>\d+)\.npz")


def _scores(x: np.ndarray, released: dict[int, np.ndarray]) -> dict[tuple[int, str], float]:
    out = {}
    for t, y in released.items():
        out[(t, "tree")] = w1_tree_upper(x[:t], np.clip(y, 0, 1), depth=20)
        out[(t, "size")] = float(len(y))
        if t == 4000:
            out[(t, "exact")] = w1_exact(x[:t], y, max_points=5000).value
    return out


def compare(folder: Path) -> list[dict[str, object]]:
    """One row per (stream, ε, t, metric): public and clean-room means, ratio, Welch p."""
    public: dict[tuple[str, float], list[dict[tuple[int, str], float]]] = defaultdict(list)
    for path in sorted(folder.glob("res_*.npz")):
        match = NAME.fullmatch(path.name)
        if match is None:
            continue
        stream, eps = match["stream"], float(match["eps"])
        x = np.load(folder / "data" / f"{stream}.npy")
        with np.load(path) as saved:
            released = {int(k): saved[k] for k in saved.files if k.isdigit()}
        public[(stream, eps)].append(_scores(x, released))
    rows = []
    for (stream, eps), runs in sorted(public.items()):
        x = np.load(folder / "data" / f"{stream}.npy")
        sizes = sorted({t for run in runs for t, _ in run})
        ours = [_scores(x, phdstream_releases(x, eps, sizes, seed=seed))
                for seed in range(len(runs))]
        for key in sorted(runs[0]):
            a = [run[key] for run in runs]
            b = [run[key] for run in ours]
            p = float(ttest_ind(a, b, equal_var=False).pvalue) if np.std(a) + np.std(b) else 1.0
            rows.append({"stream": stream, "epsilon": eps, "t": key[0], "metric": key[1],
                         "public": float(np.mean(a)), "clean_room": float(np.mean(b)),
                         "ratio": float(np.mean(b) / np.mean(a)), "p": p, "seeds": len(a)})
    return rows


if __name__ == "__main__":
    print("| stream | ε | t | metric | public code | clean room | ratio | Welch p | seeds |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for r in compare(Path(sys.argv[1])):
        print(f"| {r['stream']} | {r['epsilon']:g} | {r['t']:,} | {r['metric']} | "
              f"{r['public']:.4g} | {r['clean_room']:.4g} | {r['ratio']:.2f} | {r['p']:.2f} | "
              f"{r['seeds']} |")
