"""Issue 8's benchmark: dpsynth under add/remove neighbours against offline PMM and PHDStream.

Layer: adapter (workload generation may use numpy.random; never privacy noise).

Set-up of docs/algorithms.md E.2: ε = 1 under add/remove (insertion) neighbours
(and, for reference, the papers' replacement notion: adaptive vs PMM-rep),
d = 2, a step (and a release) every 500 records, uniform data and Gowalla NYC in time order,
exact ℓ∞ W1 at t = 4000 and the depth-20 tree upper bound at 2·10^4 and 10^5
(accuracy-study.md §1.3). One streaming run per (data, seed, schedule) gives the releases at all
three t. Baselines in the same run: offline PMM at add/remove ε on each prefix, the i.i.d. floor,
and PHDStream's published side-by-side numbers (its code is not run here). Also: relative
range-query error (PrivTree's smoothing, 200 medium boxes) and end-to-end throughput (ingest
plus a release every 500 records), against PHDStream's 100–170 records/s.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from statistics import median
from typing import Any

import numpy as np

from benchmarks.accuracy import GOWALLA, load_gowalla, uniform_stream
from benchmarks.modes import w1
from dpsynth.eval.queries import random_boxes, relative_range_error
from dpsynth.offline.pmm import pmm_synthesize
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.tree import route

#: PHDStream at add/remove ε = 1, batches of 500, 3 seeds (peer-phdstream.md): W1 by (data, t).
PHDSTREAM_W1 = {
    ("uniform", 4000): 0.0190, ("uniform", 20000): 0.0534, ("uniform", 100000): 0.0502,
    ("gowalla", 4000): 0.0167, ("gowalla", 20000): 0.0249, ("gowalla", 100000): 0.0250,
}
#: PHDStream at replacement ε = 1 (change_sensitivity 2): its ratios to PMM times PMM's W1.
PHDSTREAM_W1_REPLACE = {
    (data, t): ratio * w / base
    for (data, t, ratio), w, base in zip(
        [("uniform", 4000, 0.93), ("uniform", 20000, 1.60), ("uniform", 100000, 3.63),
         ("gowalla", 4000, 1.30), ("gowalla", 20000, 1.83), ("gowalla", 100000, 4.12)],
        [0.0190, 0.0534, 0.0502, 0.0167, 0.0249, 0.0250],
        [0.77, 1.17, 2.45, 1.02, 1.23, 2.61], strict=True)
}
#: PHDStream's speed: 10^5 records in 580–1018 s (peer-phdstream.md).
PHDSTREAM_RECORDS_PER_S = (100_000 / 1018, 100_000 / 580)
SCHEDULES: dict[str, dict[str, Any]] = {
    "guided": {"mechanism": "guided", "neighbours": "add_remove"},  # the default (auto)
    "guided@replace": {"mechanism": "guided", "neighbours": "replace"},
    "adaptive": {"mechanism": "adaptive", "neighbours": "add_remove"},
    "adaptive-pooled": {"mechanism": "adaptive", "neighbours": "add_remove",
                        "current_shape": "pooled"},
    # the papers' replacement notion: adaptive against PMM-rep
    "adaptive@replace": {"mechanism": "adaptive", "neighbours": "replace"},
}
STEP = 500
SIZES = (4000, 20000, 100000)


def _datasets(include_gowalla: bool) -> dict[str, Any]:
    data: dict[str, Any] = {"uniform": lambda n, seed: uniform_stream(n, 2, 1000 + seed)}
    if include_gowalla and GOWALLA.exists():
        gowalla = load_gowalla()
        data["gowalla"] = lambda n, seed: gowalla[:n]  # one fixed stream; seeds vary the key
    return data


def _stream_releases(x: np.ndarray, key: bytes, options: dict[str, Any],
                     sizes: Iterable[int]) -> tuple[dict[int, np.ndarray], float]:
    """Points released at each t in ``sizes`` (one run), and the run's end-to-end seconds."""
    synth = OnlineSynthesizer(d=2, epsilon=1.0, key=key, release_every=STEP, **options)
    wanted = set(sizes)
    out: dict[int, np.ndarray] = {}
    seconds = 0.0
    for start in range(0, len(x), STEP):
        began = time.perf_counter()
        if synth.neighbours == "add_remove":  # a fixed batch is one public step (P11)
            synth.add(x[start:start + STEP])
            releases = [synth.step()]
        else:
            releases = synth.extend(x[start:start + STEP])
        seconds += time.perf_counter() - began
        if synth.t in wanted and releases:
            out[synth.t] = releases[-1].points  # materialised outside the timed region
    return out, seconds


def ingest_only_seconds(x: np.ndarray, key: bytes) -> float:
    """Seconds to route ``x`` and run its steps (500 records) and block histograms through the
    adaptive engine without making releases: the ingest side alone."""
    synth = OnlineSynthesizer(d=2, epsilon=1.0, key=key, release_every=STEP,
                              **SCHEDULES["adaptive"])
    engine = synth._mechanism  # the step engine under the synthesizer (no release per step)
    assert engine is not None
    began = time.perf_counter()
    addresses = route(x, depth=synth.max_depth)
    for start in range(0, len(addresses), STEP):
        engine.add(addresses[start:start + STEP])
        engine.end_step()
    return time.perf_counter() - began


def peer_rows(seeds: int = 5, sizes: Iterable[int] = SIZES, include_gowalla: bool = True,
              schedules: Iterable[str] = tuple(SCHEDULES)) -> list[dict[str, Any]]:
    """One row per (data, t, seed, method): W1, metric, range error; plus timing rows."""
    sizes = tuple(sizes)
    boxes = random_boxes(2, 200, kind="medium", seed=7)
    rows: list[dict[str, Any]] = []
    for name in schedules:  # compile the kernels and fill caches outside the timed runs
        _stream_releases(uniform_stream(4 * STEP, 2, 0), bytes(32), SCHEDULES[name], ())
    for data, make in _datasets(include_gowalla).items():
        for seed in range(seeds):
            x = make(max(sizes), seed)
            key = (5000 + seed).to_bytes(32, "big")
            rows.append({"data": data, "seed": seed, "method": "adaptive (ingest only)",
                         "kind": "speed", "records": len(x),
                         "seconds": ingest_only_seconds(x, key)})
            for name in schedules:
                released, seconds = _stream_releases(x, key, SCHEDULES[name], sizes)
                rows.append({"data": data, "seed": seed, "method": name, "kind": "speed",
                             "records": len(x), "seconds": seconds})
                for t, points in released.items():
                    rows.append(_score(data, t, seed, name, x[:t], points, boxes))
            for t in sizes:
                prefix = x[:t]
                pmm = pmm_synthesize(prefix, 1.0, key, size_hint=t)  # n public (anchors)
                rows.append(_score(data, t, seed, "pmm", prefix, pmm, boxes))
                rows.append(_score(data, t, seed, "pmm-rep", prefix,
                                   pmm_synthesize(prefix, 1.0, key, neighbours="replace"), boxes))
                rng = np.random.default_rng(seed)
                floor = (uniform_stream(t, 2, 90_000 + seed) if data == "uniform"
                         else prefix[rng.integers(0, t, t)])
                rows.append(_score(data, t, seed, "floor", prefix, floor, boxes))
    return rows


def _score(data: str, t: int, seed: int, method: str, x: np.ndarray, y: np.ndarray,
           boxes: np.ndarray) -> dict[str, Any]:
    value, metric = w1(x, y)
    rel = float(np.mean(relative_range_error(x, y, boxes)))
    return {"data": data, "t": t, "seed": seed, "method": method, "kind": "accuracy",
            "w1": value, "metric": metric, "range_rel": rel}


def summarise_peer(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians per (data, t, method), ratios to PMM and PHDStream, winners, throughput."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for row in rows:
        if row["kind"] == "accuracy":
            groups.setdefault((row["data"], row["t"], row["method"]), []).append(row)
    table = []
    for (data, t, method), members in sorted(groups.items()):
        w = median(r["w1"] for r in members)
        replace = method.endswith("@replace") or method == "pmm-rep"
        pmm = median(r["w1"] for r in groups[(data, t, "pmm-rep" if replace else "pmm")])
        peer = (PHDSTREAM_W1_REPLACE if replace else PHDSTREAM_W1).get((data, t))
        table.append({"data": data, "t": t, "method": method, "metric": members[0]["metric"],
                      "w1": w, "ratio_pmm": w / pmm,
                      "ratio_phdstream": (w / peer) if peer else float("nan"),
                      "range_rel": median(r["range_rel"] for r in members),
                      "seeds": len(members)})
    winners = {}
    for data, t in sorted({(r["data"], r["t"]) for r in table}):
        for notion in ("add_remove", "replace"):
            candidates = [r for r in table if (r["data"], r["t"]) == (data, t)
                          and r["method"] in SCHEDULES
                          and SCHEDULES[r["method"]]["neighbours"] == notion]
            if candidates:
                best = min(candidates, key=lambda r: r["w1"])["method"]
                winners[f"{data}@{t} ({notion})"] = best
    speed = {}
    for method in (*SCHEDULES, "adaptive (ingest only)"):
        runs = [r for r in rows if r["kind"] == "speed" and r["method"] == method]
        if runs:
            rate = median(r["records"] / r["seconds"] for r in runs)
            speed[method] = {"records_per_s": rate,
                             "vs_phdstream": (rate / PHDSTREAM_RECORDS_PER_S[1],
                                              rate / PHDSTREAM_RECORDS_PER_S[0])}
    return {"table": table, "winners": winners, "speed": speed}


def print_peer(summary: dict[str, Any], console: Any) -> None:
    """Rich tables of :func:`summarise_peer`."""
    from rich.table import Table

    table = Table(title="ε = 1, step 500: median W1 over seeds (ratios within the method's "
                        "notion: PMM and PHDStream at add/remove, PMM-rep and PHDStream at "
                        "replacement for @replace)")
    for column in ("data", "t", "method", "metric", "W1", "÷ PMM", "÷ PHDStream", "range rel"):
        table.add_column(column, justify="left" if column in ("data", "method") else "right")
    for r in summary["table"]:
        table.add_row(r["data"], f"{r['t']:,}", r["method"], r["metric"], f"{r['w1']:.4f}",
                      f"{r['ratio_pmm']:.2f}", f"{r['ratio_phdstream']:.2f}",
                      f"{r['range_rel']:.3f}")
    console.print(table)
    console.print("winner per (data, t): " + ", ".join(
        f"{k} → {v}" for k, v in summary["winners"].items()))
    for method, s in summary["speed"].items():
        lo, hi = s["vs_phdstream"]
        how = ("route, steps and block histograms, no release" if "ingest" in method
               else f"end to end, a release every {STEP}")
        console.print(f"{method}: {s['records_per_s']:,.0f} records/s ({how}); "
                      f"{lo:,.0f}–{hi:,.0f}× PHDStream")
