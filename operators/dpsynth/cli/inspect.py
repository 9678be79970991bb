"""``dpsynth inspect`` and ``dpsynth eval``: read a release file; evaluate it against its input.

Layer: adapter. ``eval`` compares a release with the raw input (W1 bracket, i.i.d. floor,
range queries): evaluation only, not private.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import msgpack
import numpy as np
from rich.console import Console
from rich.table import Table

from dpsynth.cli.common import load_source, source_options
from dpsynth.cli.errors import fail_on_dpsynth_error
from dpsynth.eval.report import evaluate_release
from dpsynth.release import read_release_file, read_release_records
from dpsynth.schema import Schema


def _schema_or_none(schema_path: Path | None, d: int) -> Schema | None:
    if schema_path is None:
        return None
    schema = Schema.from_json_file(schema_path)
    if schema.d != d:
        raise click.UsageError(f"--schema has {schema.d} columns, the release has d = {d}")
    return schema


@click.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--points", "n_points", type=click.IntRange(min=0), default=0, show_default=True,
              help="Also print the first N synthetic points.")
@click.option("--schema", "schema_path",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Print the points in the original units of this schema.")
@fail_on_dpsynth_error
def inspect(path: Path, n_points: int, schema_path: Path | None) -> None:
    """Print a release file's header, metadata, t, depth and non-empty leaves (checked read)."""
    console = Console()
    records = read_release_records(path)
    release = read_release_file(path)  # checks order, checksum and counts
    header = msgpack.unpackb(records[0], raw=False)
    table = Table(title=f"{path} ({path.stat().st_size:,} bytes, {len(records)} records)",
                  show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for field in ("format", "run_id", "partition", "sequence", "leaf_encoding", "n_chunks"):
        table.add_row(field, str(header[field]))
    table.add_row("t (points)", f"{release.t:,}")
    table.add_row("d", str(release.d))
    table.add_row("depth", f"{release.depth} ({1 << release.depth:,} leaves)")
    table.add_row("non-empty leaves", f"{int(np.count_nonzero(release.leaf_counts)):,}")
    table.add_row("placement seed (public)", release.placement_seed.hex()[:16] + "…")
    table.add_section()
    for name, value in sorted(release.metadata.items()):
        table.add_row(f"metadata.{name}", json.dumps(value, ensure_ascii=False))
    console.print(table)
    if n_points:
        schema = _schema_or_none(schema_path, release.d)
        points = release.points[:n_points]
        names = schema.names if schema else tuple(f"x{i}" for i in range(release.d))
        values = schema.from_unit(points) if schema else points
        grid = Table(title=f"first {len(points)} of {release.t:,} points"
                     + (" (original units)" if schema else " (in [0,1]^d)"))
        for name in names:
            grid.add_column(name, justify="right")
        for row in values.tolist():
            grid.add_row(*(f"{v:.6g}" for v in row))
        console.print(grid)


@click.command(name="eval")
@click.argument("release_path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@source_options
@click.option("--w1-points", type=click.IntRange(min=100), default=5000, show_default=True,
              help="Exact W1 on at most this many points (subsampled beyond, and said).")
@click.option("--boxes", type=click.IntRange(min=1), default=200, show_default=True,
              help="Random query boxes per size (small, medium, large).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the results to this JSON file.")
@click.option("--records", type=click.IntRange(min=0),
              help="Valid input records (in time order) behind the release: needed under "
                   "add/remove, whose t is a noisy size (dpsynth run's summary.json lists them "
                   "as records_behind_releases).")
@fail_on_dpsynth_error
def evaluate(release_path: Path, input_path: Path | None, schema_path: Path | None,
             dataset: str | None, points: int, seed: int, limit: int | None, w1_points: int,
             boxes: int, json_path: Path | None, records: int | None) -> None:
    """Evaluate a release against the first t valid records of its input (default: the
    generated stream of ``dpsynth run`` with the same --points and --seed).

    The results use the raw input: evaluation only, not private.
    """
    console = Console()
    release = read_release_file(release_path)
    source = load_source(input_path, schema_path, dataset, points, seed, limit)
    if source.d != release.d:
        raise click.UsageError(f"the input has d = {source.d}, the release d = {release.d}")
    true = source.valid_points()
    fed = release.t if records is None else records
    if records is None and release.metadata.get("neighbours") == "add_remove":
        raise click.UsageError(  # privacy: P11 — no release says how many records it covers
            "under add/remove a release's t is a noisy size and nothing in it gives the number "
            "of records it covers; pass --records N (dpsynth run's summary.json lists them as "
            "records_behind_releases)")
    if len(true) < fed:
        raise click.UsageError(
            f"the input has {len(true):,} valid records, fewer than the release's t = "
            f"{fed:,}: is it the input the release was made from?"
        )
    console.print(f"release {release_path}: t = {release.t:,}, depth {release.depth}")
    console.print(f"input: {source.label}")
    with console.status("evaluating: exact W1 (POT), bounds, i.i.d. floor, range queries…"):
        result = evaluate_release(true[:fed], release.points,
                                                 max_points=w1_points, boxes=boxes)
    _print_eval(console, release.t, result)
    if json_path is not None:
        json_path.write_text(json.dumps({"release": str(release_path), "t": release.t,
                                         "input": source.label, **result}, indent=2) + "\n")
        console.print(f"results written to {json_path}")


def _print_eval(console: Console, t: int, result: dict[str, Any]) -> None:
    table = Table(title=f"release vs the true prefix (t = {t:,}), ℓ∞ W1 on [0,1]^d")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("note")
    exact_note = (f"random subsamples of {result['exact_points']:,} points"
                  if result["exact_subsampled"] else "all points")
    table.add_row("W1 exact", f"{result['exact']:.4f}", exact_note)
    table.add_row("W1 tree upper bound", f"{result['tree_upper']:.4f}", "all points")
    table.add_row("W1 sliced lower bound", f"{result['sliced_lower']:.4f}", "all points")
    if "iid_floor" in result:
        table.add_row("i.i.d. floor", f"{result['iid_floor']:.4f}",
                      f"W1 of two disjoint halves of {result['iid_floor_points']:,} points")
        table.add_row("W1 exact ÷ floor", f"{result['exact'] / result['iid_floor']:.2f}×", "")
    table.add_section()
    for kind, err in result["range_queries"].items():
        table.add_row(f"range queries, {kind} boxes", f"{err['median']:.3f}",
                      f"median relative error; mean {err['mean']:.3f}, p90 {err['p90']:.3f} "
                      f"({err['boxes']} boxes)")
    console.print(table)


