"""The two plots of ``dpsynth run`` (true prefix next to the synthetic release, W1 over t) and
its W1 report.

Layer: adapter. Evaluation artefacts computed from the raw input: not private, never published.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from dpsynth.cli.common import Source, figure

PLOT_POINTS = 20_000  # largest number of points drawn per scatter
CURVE_EXACT_POINTS = 1_000  # exact W1 of the curve: subsamples of this size (seconds each)


def _stride(points: np.ndarray, limit: int = PLOT_POINTS) -> np.ndarray:
    """At most ``limit`` points, evenly strided (deterministic; no random generator here)."""
    if len(points) <= limit:
        return points
    return points[np.linspace(0, len(points) - 1, limit).astype(int)]


def plot_true_vs_synthetic(path: Path, true: np.ndarray, synth: np.ndarray, source: Source,
                            title: str) -> None:
    """Scatter (d ≥ 2: first two coordinates) or histograms (d = 1), true next to synthetic."""
    if source.units is not None:
        true, synth = source.units.from_unit(true), source.units.from_unit(synth)
    true, synth = _stride(true), _stride(synth)
    fig = figure(11 if source.d > 1 else 7, 5)
    if source.d == 1:
        ax = fig.subplots()
        bins = np.linspace(min(true.min(), synth.min()), max(true.max(), synth.max()), 51)
        ax.hist(true[:, 0], bins=bins, alpha=0.5, density=True, label="true prefix")
        ax.hist(synth[:, 0], bins=bins, alpha=0.5, density=True, label="synthetic release")
        ax.set_xlabel(source.names[0])
        ax.legend()
    else:
        axes = fig.subplots(1, 2, sharex=True, sharey=True)
        for ax, pts, name, colour in ((axes[0], true, "true prefix", "C0"),
                                      (axes[1], synth, "synthetic release", "C1")):
            ax.scatter(pts[:, 0], pts[:, 1], s=1, alpha=0.3, color=colour, rasterized=True)
            ax.set_title(f"{name} ({len(pts):,} points shown)", fontsize=9)
            ax.set_xlabel(source.names[0])
            ax.set_ylabel(source.names[1])
        if source.units is None:
            axes[0].set_xlim(0, 1)
            axes[0].set_ylim(0, 1)
    more = f" (first 2 of d = {source.d} coordinates)" if source.d > 2 else ""
    fig.suptitle(title + more, fontsize=10)
    fig.savefig(path, dpi=110)


def plot_w1_over_t(path: Path, curve: list[dict[str, Any]], title: str,
                    final: dict[str, Any]) -> None:
    """W1 bracket (sliced ≤ exact ≤ tree) of the evaluated releases against t, and the final
    release's exact W1 as printed (on ``--w1-points`` subsamples), marked apart."""
    fig = figure(7, 4.5)
    ax = fig.subplots()
    ts = [c["t"] for c in curve]
    ax.plot(ts, [c["tree_upper"] for c in curve], marker="v", label="tree upper bound")
    exact_label = "exact W1" + (f" (subsamples of {CURVE_EXACT_POINTS:,})"
                                if any(c["exact_subsampled"] for c in curve) else "")
    ax.plot(ts, [c["exact"] for c in curve], marker="o", label=exact_label)
    ax.plot(ts, [c["sliced_lower"] for c in curve], marker="^", label="sliced lower bound")
    if ts and final["exact_points"] != curve[-1]["exact_points"]:
        ax.plot([ts[-1]], [final["exact"]], marker="*", markersize=11, linestyle="none",
                label=f"final release, exact W1 on subsamples of {final['exact_points']:,} "
                      "(as printed)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("t (records in the release)")
    ax.set_ylabel("ℓ∞ W1 on [0,1]^d")
    ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=110)


def print_w1(console: Console, t: int, w1: dict[str, Any],
              curve: list[dict[str, Any]]) -> None:
    """The final release's W1 bracket, and the curve's value at the same release if it was
    computed on other subsamples (labelled, so the two numbers are not confused)."""
    sample = (f"exact on random subsamples of {w1['exact_points']:,} points (of {t:,})"
              if w1["exact_subsampled"] else f"exact on all {t:,} points")
    console.print(
        f"evaluation (not private): final release t = {t:,}: ℓ∞ W1 to the true prefix "
        f"{w1['exact']:.4f} ({sample}); sliced lower bound {w1['sliced_lower']:.4f}, tree "
        f"upper bound {w1['tree_upper']:.4f}", highlight=False)
    if curve and curve[-1]["exact_points"] != w1["exact_points"]:
        console.print(
            f"  w1-over-t.png plots exact W1 on subsamples of {curve[-1]['exact_points']:,} "
            f"points ({curve[-1]['exact']:.4f} at t = {curve[-1]['t']:,}) and marks the value "
            "above: smaller subsamples give larger W1", highlight=False)
