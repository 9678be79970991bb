"""``dpsynth demo``: the counters of one tree level on a generated stream, with CSVs and a plot.

Layer: adapter. The first end-to-end demo, kept as a teaching example of Inhomogeneous Sparse
Counting on ticks (one LevelCounters of 2^12 cells, the paper's schedule ε_{12,r}).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dpsynth.accounting import paper_schedule
from dpsynth.cli.common import resolve_key
from dpsynth.clock import TickClock
from dpsynth.counters.level import LevelCounters
from dpsynth.datasets import DemoStream
from dpsynth.keys import KEY_ENV
from dpsynth.noise import KeyedNoise

# Demo parameters: one tree level of a d = 2 tree, the paper's budget schedule (eq. 5.3).
DEMO_D = 2
DEMO_EPSILON = 1.0
DEMO_CELL_BITS = 12  # tree level j = 12: 2^12 cells on a 64 × 64 grid
DEMO_RELEASE_EVERY = 1000  # records per tick

CSV_COLUMNS = (
    "tick", "records", "time_level", "tick_records",
    "true_total", "noisy_total", "mean_abs_error", "max_abs_error",
)


@click.group()
@click.version_option(package_name="dpsynth")
def main() -> None:
    """dpsynth: differentially private synthetic data streams (He–Vershynin–Zhu)."""




def _demo_noise() -> tuple[KeyedNoise, str, bool]:
    """The demo's noise source, a printable label and whether it is the public demo key."""
    key = resolve_key()
    return KeyedNoise(key.reveal()), key.label(), key.is_demo


def tick_sizes(clock: TickClock, start_level: int, n_ticks: int) -> list[tuple[int, int]]:
    """(time level, records) of the first ``n_ticks`` ticks from the start of ``start_level``.

    Ticks end at every multiple of ``release_every`` and at every level end t_{r+1} − 1, as in
    :class:`~dpsynth.clock.TickClock`, so the first and last tick of a level may be short.

    >>> tick_sizes(TickClock(epsilon=1.0, release_every=5), 3, 6)  # levels [8, 16), [16, 32)
    [(3, 3), (3, 5), (4, 5), (4, 5), (4, 5), (4, 1)]
    """
    out: list[tuple[int, int]] = []
    step, r = clock.release_every, start_level
    while len(out) < n_ticks:
        lo, hi = clock.level_start(r), clock.level_start(r + 1) - 1
        if hi >= lo:
            ends = [*range(math.ceil(lo / step) * step, hi, step), hi]
            if len(ends) != clock.ticks_in_level(r):
                raise RuntimeError(f"tick grid of level r={r} disagrees with TickClock")
            out.extend((r, end - prev) for prev, end in zip([lo - 1, *ends], ends, strict=False))
        r += 1
    return out[:n_ticks]


def _feed_level(
    counters: LevelCounters, stream: DemoStream, sizes: list[tuple[int, int]], records: int,
    console: Console,
) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Run the ticks of ``sizes`` through ``counters``; per-tick rows and the true totals."""
    true = np.zeros(stream.n_cells, np.int64)
    rows: list[dict[str, Any]] = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("ticks", total=len(sizes))
        for tick, (level, size) in enumerate(sizes, start=1):
            cells, counts = stream.tick(size)
            counters.update(cells, counts)
            true[cells] += counts
            records += size
            noisy = counters.values()
            error = np.abs(noisy - true)
            rows.append({
                "tick": tick, "records": records, "time_level": level, "tick_records": size,
                "true_total": int(true.sum()), "noisy_total": int(noisy.sum()),
                "mean_abs_error": round(float(error.mean()), 4),
                "max_abs_error": int(error.max()),
            })
            progress.advance(task)
    return rows, true


def _write_csvs(
    out: Path, rows: list[dict[str, Any]], stream: DemoStream, true: np.ndarray, noisy: np.ndarray
) -> None:
    """``counters.csv`` (one row per tick) and ``cells.csv`` (final totals per cell)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "counters.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    with open(out / "cells.csv", "w", newline="") as f:
        cells_writer = csv.writer(f)
        cells_writer.writerow(("cell", "x", "y", "true_total", "noisy_total"))
        cells_writer.writerows(zip(range(stream.n_cells), stream.x.tolist(), stream.y.tolist(),
                                   true.tolist(), noisy.tolist(), strict=True))


def _write_plot(path: Path, stream: DemoStream, true: np.ndarray, noisy: np.ndarray,
                rows: list[dict[str, Any]], label: str) -> None:
    """2 × 2 PNG: true and noisy cell totals on the grid, noisy vs true, MAE over ticks."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 9), layout="constrained")
    FigureCanvasAgg(fig)
    (ax_true, ax_noisy), (ax_scatter, ax_mae) = fig.subplots(2, 2)
    lo, hi = min(0, int(noisy.min())), max(int(true.max()), int(noisy.max()), 1)
    for ax, values, title in ((ax_true, true, "true"), (ax_noisy, noisy, "noisy (released)")):
        image = ax.imshow(stream.grid(values), origin="lower", vmin=lo, vmax=hi, cmap="viridis")
        ax.set_title(f"{title} cell totals after tick {rows[-1]['tick']}")
        ax.set_xlabel("x cell")
        ax.set_ylabel("y cell")
        fig.colorbar(image, ax=ax, shrink=0.8)
    ax_scatter.scatter(true, noisy, s=4, alpha=0.4)
    ax_scatter.plot([0, hi], [0, hi], color="black", lw=1, ls="--", label="noisy = true")
    ax_scatter.set_xlabel("true total")
    ax_scatter.set_ylabel("noisy total")
    ax_scatter.set_title(f"{true.size:,} cells at the end")
    ax_scatter.legend(loc="upper left")
    ticks = [row["tick"] for row in rows]
    ax_mae.plot(ticks, [row["mean_abs_error"] for row in rows], lw=1.5)
    for prev, row in zip(rows, rows[1:], strict=False):
        if row["time_level"] != prev["time_level"]:
            ax_mae.axvline(row["tick"] - 0.5, color="grey", lw=0.8, ls=":")
            ax_mae.annotate(
                f"r={row['time_level']}", (row["tick"], 0.98), xycoords=("data", "axes fraction"),
                xytext=(2, 0), textcoords="offset points", rotation=90, va="top",
                fontsize=8, color="grey",
            )
    ax_mae.set_xlabel("tick")
    ax_mae.set_ylabel("mean |noisy − true| over cells")
    ax_mae.set_title("mean absolute error (dotted: new time level)")
    fig.suptitle(f"dpsynth demo: one tree level, ε = {DEMO_EPSILON:g} paper schedule; {label}",
                 fontsize=10)
    fig.savefig(path, dpi=110)


@click.command()
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), default=Path("dpsynth-demo-out"),
    show_default=True, help="Directory for counters.csv, cells.csv and counters.png.",
)
@click.option("--ticks", type=click.IntRange(min=1), default=200, show_default=True,
              help=f"Ticks to run (about {DEMO_RELEASE_EVERY} records each).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the generated stream (not of the privacy noise, which is keyed).")
def demo(out: Path, ticks: int, seed: int) -> None:
    """Feed a generated stream to the counters of one tree level; write CSVs and a plot.

    2^12 cells (tree level j = 12 of a 2-D tree, a 64 × 64 grid) with Gaussian-blob
    popularity; the counters start at time level r = 12 (record 4096) and spend the paper's
    budget ε_{12,r} (eq. 5.3, ε = 1). The noise key is the public demo key unless
    DPSYNTH_NOISE_KEY holds 64 hex characters.
    """
    console = Console()
    noise, key_label, is_demo_key = _demo_noise()
    schedule = paper_schedule(DEMO_D, DEMO_EPSILON)
    clock = TickClock(epsilon=DEMO_EPSILON, release_every=DEMO_RELEASE_EVERY)
    j = DEMO_CELL_BITS
    stream = DemoStream(bits=j, seed=seed)
    sizes = tick_sizes(clock, j, ticks)
    console.print(
        f"dpsynth demo: {stream.n_cells:,} cells (tree level j={j}), ε={DEMO_EPSILON:g}, "
        f"ε_{{{j},r}} = {schedule.level_epsilon(j, j):.4f} at r={j} (paper eq. 5.3), "
        f"a tick every {DEMO_RELEASE_EVERY} records from t_{j} = {clock.level_start(j):,}"
    )
    console.print(f"noise key: {key_label}")
    counters = LevelCounters(
        stream.n_cells, lambda r: schedule.level_epsilon(j, r), j, clock, noise, ("demo", j)
    )
    rows, true = _feed_level(counters, stream, sizes, clock.level_start(j) - 1, console)
    noisy = counters.values()
    _write_csvs(out, rows, stream, true, noisy)
    short_label = "public demo key" if is_demo_key else f"key from {KEY_ENV}"
    _write_plot(out / "counters.png", stream, true, noisy, rows, short_label)
    last = rows[-1]
    console.print(
        f"{last['tick']} ticks, {last['records']:,} records (time level {last['time_level']}): "
        f"mean |noisy − true| = {last['mean_abs_error']:.2f} per cell, "
        f"max {last['max_abs_error']}; noisy total {last['noisy_total']:,} "
        f"vs true {last['true_total']:,}"
    )
    console.print(f"wrote {out / 'counters.csv'}, {out / 'cells.csv'}, {out / 'counters.png'}")


