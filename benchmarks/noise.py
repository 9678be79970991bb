"""Benchmarks of the exact noise sampler and of one LevelCounters tick, with the demo's workload.

Layer: tooling (imported by :mod:`dpsynth.cli` only; the core never imports it). Machines are
noisy, so every figure is a median over repeats, and every speed is reported as a ratio to a
baseline measured in the same run, interleaved with it, so that load from other processes hits
both sides alike. ``numpy.random`` is allowed here because it only chooses *workloads* (which
cells a tick touches, how many records fall where); every privacy noise value is still drawn by
:class:`~dpsynth.noise.KeyedNoise`.

Benchmarks
----------
``run_noise_bench``
    Exact discrete Laplace samples/s of ``KeyedNoise.discrete_laplace`` against OpenDP's exact
    sampler (``make_laplace`` on ``i64``) and against numpy's *unsafe* geometric-difference trick
    (PCG64, not a CSPRNG), at several scales. The issue's goal is ≥ 10^7 samples/s.
``run_level_bench``
    Time of one tick of a ``LevelCounters`` of 2^20 cells touched in 10^4 cells, against the
    same tick touched in 10^3 cells: work should grow with touched cells, not with cells, so the
    ratio should be ≈ 10. Also construction time and bytes of state per cell.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from dpsynth import noise as _noise
from dpsynth.clock import TickClock
from dpsynth.counters.level import LevelCounters
from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise

#: Public key of the benchmarks: the noise timed here is never released.
BENCH_KEY = bytes(32)
#: The issue's target rate for the exact sampler.
GOAL_SAMPLES_PER_S = 1e7


def machine_info() -> dict[str, Any]:
    """Date, CPU count, load and library versions, for the record next to the numbers."""
    import numba

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    try:
        layer = numba.threading_layer()  # known once a parallel kernel has run
    except ValueError:
        layer = numba.config.THREADING_LAYER
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "numba_threads": numba.get_num_threads(),
        "numba_threading_layer": layer,
        "cpu": cpu,
        "loadavg_1m": round(load[0], 2),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "opendp": version("opendp"),
    }


def _timed(fn: Callable[[], object]) -> float:
    """Wall-clock seconds of one call."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


# -- noise --------------------------------------------------------------------------------------


def _opendp_sampler(scale: float, n: int) -> Callable[[], object]:
    import opendp.prelude as dp

    dp.enable_features("contrib")
    measurement = dp.m.make_laplace(
        dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l1_distance(T=dp.i64), scale=scale
    )
    zeros = [0] * n
    return lambda: measurement(zeros)


def run_noise_bench(
    repeats: int = 5,
    *,
    scales: Sequence[float] = (2.0, 50.0),
    n_dpsynth: int = 10**6,
    n_opendp: int = 2 * 10**5,
    n_numpy: int = 10**6,
    seed: int = 0,
) -> dict[str, Any]:
    """Exact discrete-Laplace samples/s: dpsynth vs OpenDP (exact) vs numpy (unsafe).

    Parameters
    ----------
    repeats
        Timed calls per sampler and scale; each reported rate is the median over them.
    scales
        Scales σ of Lap_Z(σ) (multiples of 1/256, so dpsynth samples exactly σ).
    n_dpsynth, n_opendp, n_numpy
        Draws per call. OpenDP runs at ~10^5/s, hence its smaller batch.
    seed
        Seed of numpy's PCG64 generator (the unsafe baseline).

    Returns
    -------
    dict
        Per scale: per-repeat samples/s of each sampler, their medians and the medians of the
        per-repeat ratios dpsynth/OpenDP and dpsynth/numpy; ``goal_met`` compares the slowest
        scale's dpsynth median with :data:`GOAL_SAMPLES_PER_S`.
    """
    if repeats < 1:
        raise ConfigError(f"repeats ({repeats}) must be >= 1; use 5 or more on a noisy machine")
    _noise.warm_up()
    keyed = KeyedNoise(BENCH_KEY)
    rng = np.random.default_rng(seed)  # PCG64
    rows = []
    for scale in scales:
        opendp = _opendp_sampler(scale, n_opendp)
        p = -math.expm1(-1.0 / scale)  # success probability; difference of two is Lap_Z(σ)
        runs: dict[str, list[float]] = {"dpsynth": [], "opendp": [], "numpy_unsafe": []}
        for rep in range(repeats):
            context = ("bench", "noise", str(scale), rep)
            start = time.perf_counter()
            keyed.discrete_laplace(scale, context, n_dpsynth)
            runs["dpsynth"].append(n_dpsynth / (time.perf_counter() - start))
            runs["opendp"].append(n_opendp / _timed(opendp))
            start = time.perf_counter()
            rng.geometric(p, n_numpy) - rng.geometric(p, n_numpy)
            runs["numpy_unsafe"].append(n_numpy / (time.perf_counter() - start))
        rows.append(
            {
                "scale": scale,
                "draws": {"dpsynth": n_dpsynth, "opendp": n_opendp, "numpy_unsafe": n_numpy},
                "samples_per_s_runs": runs,
                "samples_per_s": {name: _median(v) for name, v in runs.items()},
                "ratio_vs_opendp": _median(
                    [a / b for a, b in zip(runs["dpsynth"], runs["opendp"], strict=True)]
                ),
                "ratio_vs_numpy_unsafe": _median(
                    [a / b for a, b in zip(runs["dpsynth"], runs["numpy_unsafe"], strict=True)]
                ),
            }
        )
    slowest = min(row["samples_per_s"]["dpsynth"] for row in rows)
    return {
        "benchmark": "noise",
        "repeats": repeats,
        "scales": rows,
        "goal_samples_per_s": GOAL_SAMPLES_PER_S,
        "goal_met": slowest >= GOAL_SAMPLES_PER_S,
        "machine": machine_info(),
    }


# -- level counters ------------------------------------------------------------------------------


def _tick_workload(
    rng: np.random.Generator, n_cells: int, touched: int, ticks: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``ticks`` ticks of ``touched`` distinct random cells with counts 1..3."""
    return [
        (
            np.sort(rng.choice(n_cells, size=touched, replace=False)),
            rng.integers(1, 4, size=touched),
        )
        for _ in range(ticks)
    ]


def _time_ticks(level: LevelCounters, work: list[tuple[np.ndarray, np.ndarray]]) -> list[float]:
    """Seconds of each ``level.update`` over the pre-drawn ticks of ``work``."""
    times = []
    for cells, counts in work:
        start = time.perf_counter()
        level.update(cells, counts)
        times.append(time.perf_counter() - start)
    return times


def _kernel_call_floor(keyed: KeyedNoise, calls: int = 20) -> float:
    """Median seconds of a one-draw call of a parallel kernel: the fixed cost of each tick.

    A tick of LevelCounters calls the parallel noise kernels at least once (the firing-time
    draw of its touched cells); this floor is paid whatever the number of touched cells.
    """
    times = []
    for i in range(calls):
        start = time.perf_counter()
        keyed.uniform_at(("bench", "floor"), 0, i)
        times.append(time.perf_counter() - start)
    return _median(times)


def run_level_bench(
    repeats: int = 5,
    *,
    n_cells: int = 2**20,
    touched: Sequence[int] = (10_000, 1_000, 10),
    ticks: int = 20,
    level_epsilon: float = 0.05,
    start_level: int = 25,
    release_every: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Time per tick of a ``LevelCounters`` against the number of touched cells.

    Each repeat builds a fresh ``LevelCounters`` per workload (timed separately: construction
    draws the thresholds and firing times of every cell) and times ``ticks`` ticks of it.

    Parameters
    ----------
    repeats
        Repeats; each reported figure is the median over repeats of per-repeat medians.
    n_cells
        Cells of the level (2^20 in the issue).
    touched
        Touched cells per tick, one workload each. The ratio is touched[0] over touched[1]; a
        third, tiny workload (10 cells) measures the fixed cost every tick pays.
    ticks
        Timed ticks per repeat; must fit inside ``start_level`` so no level ends while timing.
    level_epsilon
        ε_{j,r} for every time level r.
    start_level, release_every
        Time level r0 at which the counters start (ε = 1 clock) and the tick length N.
    seed
        Seed of the workload generator (which cells, which counts), not of any noise.

    Returns
    -------
    dict
        Construction time, bytes per cell, per-workload median tick time, the median of the
        per-repeat ratios of tick times (expected ≈ touched[0] / touched[1]), the same ratio
        above the fixed per-tick cost (the smallest workload's tick), and the fixed cost of one
        call of a parallel noise kernel.
    """
    if repeats < 1:
        raise ConfigError(f"repeats ({repeats}) must be >= 1; use 5 or more on a noisy machine")
    if len(touched) < 2 or min(touched) < 1:
        raise ConfigError(
            f"touched ({tuple(touched)}) must list at least two workloads of >= 1 cell, "
            "e.g. (10_000, 1_000, 10)"
        )
    clock = TickClock(epsilon=1.0, release_every=release_every)
    level_ticks = clock.ticks_in_level(start_level)
    if level_ticks <= ticks:
        raise ConfigError(
            f"start_level ({start_level}) has {level_ticks} ticks, not more than ticks "
            f"({ticks}): a level end would be timed; raise start_level or lower release_every"
        )
    _noise.warm_up()
    keyed = KeyedNoise(BENCH_KEY)
    rng = np.random.default_rng(seed)
    construct: list[float] = []
    floor: list[float] = []
    tick_runs: dict[int, list[float]] = {k: [] for k in touched}
    bytes_per_cell = math.nan
    for rep in range(repeats):
        for k in touched:
            work = _tick_workload(rng, n_cells, k, ticks)
            start = time.perf_counter()
            level = LevelCounters(
                n_cells, lambda r: level_epsilon, start_level, clock, keyed,
                ("bench", "level", k, rep),
            )
            construct.append(time.perf_counter() - start)
            times = _time_ticks(level, work)
            if level.level != start_level:
                raise RuntimeError("a level ended during the timed ticks; raise start_level")
            tick_runs[k].append(_median(times))
            floor.append(_kernel_call_floor(keyed))
            bytes_per_cell = level.nbytes / n_cells
    first, second, smallest = touched[0], touched[1], min(touched)
    ratios = [a / b for a, b in zip(tick_runs[first], tick_runs[second], strict=True)]
    floor_s = _median(floor)
    fixed_s = _median(tick_runs[smallest])
    above = [max(_median(tick_runs[k]) - fixed_s, 1e-9) for k in (first, second)]
    return {
        "benchmark": "level",
        "repeats": repeats,
        "n_cells": n_cells,
        "ticks_per_repeat": ticks,
        "start_level": start_level,
        "ticks_in_start_level": level_ticks,
        "level_epsilon": level_epsilon,
        "release_every": release_every,
        "construction_s_runs": construct,
        "construction_s": _median(construct),
        "bytes_per_cell": bytes_per_cell,
        "workloads": [
            {
                "touched": k,
                "tick_s_runs": tick_runs[k],
                "tick_s": _median(tick_runs[k]),
                "us_per_touched_cell": _median(tick_runs[k]) / k * 1e6,
            }
            for k in touched
        ],
        "ratio": _median(ratios),
        "kernel_call_floor_s_runs": floor,
        "kernel_call_floor_s": floor_s,
        "fixed_tick_s": fixed_s,
        "ratio_above_fixed": above[0] / above[1],
        "expected_ratio": first / second,
        "machine": machine_info(),
    }


# -- printing ------------------------------------------------------------------------------------


def _rate(x: float) -> str:
    return f"{x:.3g}/s" if x < 1e3 else f"{x:.2e}/s".replace("e+0", "e").replace("e+", "e")


def print_noise_report(result: dict[str, Any], console: Console | None = None) -> None:
    """Print :func:`run_noise_bench`'s result as a rich table plus the goal verdict."""
    console = console or Console()
    table = Table(title=f"Discrete Laplace samples/s (median of {result['repeats']} repeats)")
    for col in ("σ", "sampler", "draws/repeat", "samples/s", "dpsynth ÷ sampler"):
        table.add_column(col, justify="left" if col == "sampler" else "right")
    labels = {
        "dpsynth": "dpsynth (exact, ChaCha20)",
        "opendp": "OpenDP (exact)",
        "numpy_unsafe": "numpy (UNSAFE: PCG64)",
    }
    for row in result["scales"]:
        ratios = {
            "dpsynth": "1",
            "opendp": f"{row['ratio_vs_opendp']:.1f}×",
            "numpy_unsafe": f"{row['ratio_vs_numpy_unsafe']:.2f}×",
        }
        for name, label in labels.items():
            table.add_row(
                f"{row['scale']:g}", label, f"{row['draws'][name]:,}",
                _rate(row["samples_per_s"][name]), ratios[name],
            )
        table.add_section()
    console.print(table)
    slowest = min(result["scales"], key=lambda r: r["samples_per_s"]["dpsynth"])
    verdict = "[green]MET[/]" if result["goal_met"] else "[red]NOT MET[/]"
    console.print(
        f"Goal ≥ {_rate(result['goal_samples_per_s'])} exact samples: {verdict} "
        f"(slowest: {_rate(slowest['samples_per_s']['dpsynth'])} at σ={slowest['scale']:g}, "
        f"{result['machine']['numba_threads']} numba threads). numpy's baseline is unsafe for "
        "privacy: PCG64 is not a CSPRNG and its geometric draws use floating point."
    )


def print_level_report(result: dict[str, Any], console: Console | None = None) -> None:
    """Print :func:`run_level_bench`'s result as a rich table plus the scaling verdict."""
    console = console or Console()
    table = Table(
        title=(
            f"LevelCounters of {result['n_cells']:,} cells: one tick "
            f"(median of {result['repeats']} repeats × {result['ticks_per_repeat']} ticks)"
        )
    )
    for col in ("touched cells", "time per tick", "µs per touched cell"):
        table.add_column(col, justify="right")
    for w in result["workloads"]:
        table.add_row(
            f"{w['touched']:,}", f"{w['tick_s'] * 1e3:.2f} ms", f"{w['us_per_touched_cell']:.2f}"
        )
    console.print(table)
    first, second = result["workloads"][0]["touched"], result["workloads"][1]["touched"]
    console.print(
        f"ratio tick({first:,}) / tick({second:,}) = {result['ratio']:.2f} "
        f"(≈ {result['expected_ratio']:g} if work scales with touched cells only); "
        f"{result['ratio_above_fixed']:.1f} above the fixed cost of a tick "
        f"({result['fixed_tick_s'] * 1e3:.2f} ms); one parallel kernel call alone takes "
        f"{result['kernel_call_floor_s'] * 1e3:.2f} ms; "
        f"construction {result['construction_s']:.2f} s; "
        f"{result['bytes_per_cell']:.0f} bytes of state per cell; "
        f"ε_r = {result['level_epsilon']:g}, level r0 = {result['start_level']} "
        f"({result['ticks_in_start_level']:,} ticks)."
    )
