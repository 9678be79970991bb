"""The ``dpsynth`` command line: the embedded run, release inspection and evaluation, benchmarks.

Layer: adapter (the core never imports it). Commands:

``dpsynth run [--input FILE [--schema S] | --dataset gowalla] [--epsilon E] [--release-every N]``
    The online synthesizer embedded, no Kafka: reads a CSV/NDJSON file, a data set from
    ``../shared/data`` or (the default) a generated stream of drifting Gaussian blobs; writes
    every release to ``DIR/releases/release-{sequence:06d}.bin`` (release format v1), rejected
    records to ``DIR/dead-letter.ndjson`` (index and reason, never the value), and
    ``DIR/summary.json``, ``DIR/true-vs-synthetic.png``, ``DIR/w1-over-t.png``.
``dpsynth inspect PATH [--points N] [--schema S]``
    A release file's header, metadata, t, depth and non-empty leaves; optionally its first points.
``dpsynth eval RELEASE [--input FILE [--schema S] | --dataset …]``
    A release against the first t records of its input: W1 (exact or subsampled, tree upper,
    sliced lower), the i.i.d. floor and range-query errors.
``dpsynth bench noise|level|all|accuracy|rate|throughput|modes [--json PATH] [--plots DIR]``
    The benchmarks of :mod:`dpsynth.bench` and :mod:`dpsynth.bench_accuracy`: medians and
    same-run ratios.
``dpsynth snapshot --input FILE [--schema S] --method pmm|psmm|lowdim --out OUT.csv|.ndjson``
    One offline ε-DP synthetic copy of a file (:mod:`dpsynth.cli_snapshot`, docs/offline.md).
``dpsynth demo [--out DIR] [--ticks N]``
    The counters of one tree level on a generated stream (the first end-to-end demo, kept).

Example
-------
.. code-block:: console

    $ dpsynth run --out dpsynth-out
    $ dpsynth inspect dpsynth-out/releases/release-000020.bin --points 5
    $ dpsynth eval dpsynth-out/releases/release-000020.bin
    $ export DPSYNTH_NOISE_KEY=$(python -c 'import secrets; print(secrets.token_hex(32))')
    $ dpsynth run --input events.csv --schema schemas/example-schema.json --out private-out

The key comes from ``DPSYNTH_NOISE_KEY`` (64 hex characters) or ``DPSYNTH_NOISE_KEY_FILE``,
else the public demo key ``bytes(32)`` with a warning. It is never printed or written: only its
public fingerprint (:meth:`KeyedNoise.fingerprint`).

The summary, the plots and ``dpsynth eval`` compare releases with the raw input: they are
evaluation artefacts, not private, and must not be published. Only the releases are ε-DP.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import msgpack
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from dpsynth import bench as benchmarks
from dpsynth import bench_accuracy, bench_modes
from dpsynth.accounting import paper_schedule
from dpsynth.bench import DemoStream
from dpsynth.cli_errors import fail_on_dpsynth_error
from dpsynth.clock import TickClock
from dpsynth.counters.level import LevelCounters
from dpsynth.noise import KeyedNoise
from dpsynth.release import Release
from dpsynth.release_format import (
    encode_release,
    read_release_file,
    read_release_records,
    write_release_file,
)
from dpsynth.schema import ClipReport, Column, Schema
from dpsynth.synthesizer import OnlineSynthesizer

#: Environment variable holding the run's noise key as 64 hex characters.
KEY_ENV = "DPSYNTH_NOISE_KEY"
#: Environment variable naming a file that holds the key (64 hex characters or 32 raw bytes).
KEY_FILE_ENV = "DPSYNTH_NOISE_KEY_FILE"
#: The fallback key: public, all zeros, for demonstration only.
DEMO_KEY = bytes(32)

# `dpsynth run` defaults: a generated d = 2 stream, small enough to finish in seconds.
RUN_POINTS = 20_000
BATCH_RECORDS = 2_000  # records per call of OnlineSynthesizer.extend (one progress step)
PLOT_POINTS = 20_000  # largest number of points drawn per scatter
CURVE_RELEASES = 10  # releases evaluated for w1-over-t.png
CURVE_EXACT_POINTS = 1_000  # exact W1 of the curve: subsamples of this size (seconds each)

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


# -- the noise key -------------------------------------------------------------------------------


def _key_from_file(path: str) -> bytes:
    """The key in ``path``: 64 hex characters (whitespace ignored) or exactly 32 raw bytes."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise click.UsageError(
            f"{KEY_FILE_ENV} ({path}) cannot be read ({e.strerror}); point it at a file holding "
            "64 hex characters"
        ) from None
    text = data.strip()
    if len(text) == 64:
        try:
            return bytes.fromhex(text.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            pass
    if len(data) == 32:
        return data
    raise click.UsageError(
        f"{KEY_FILE_ENV} ({path}) must hold 64 hex characters or 32 raw bytes; write one with "
        "`python -c 'import secrets; print(secrets.token_hex(32))' > FILE`"
    )


def resolve_key() -> tuple[bytes, str, bool]:
    """The run's noise key, a printable label and whether it is the public demo key.

    From ``DPSYNTH_NOISE_KEY`` (64 hex), else ``DPSYNTH_NOISE_KEY_FILE``, else :data:`DEMO_KEY`.
    The label names a private key by its fingerprint only; error messages never echo the key.
    """
    raw = os.environ.get(KEY_ENV, "").strip()
    path = os.environ.get(KEY_FILE_ENV, "").strip()
    if raw and path:
        raise click.UsageError(f"set only one of {KEY_ENV} and {KEY_FILE_ENV}, not both")
    if path:
        key = _key_from_file(path)
        return key, f"from {KEY_FILE_ENV} (fingerprint {KeyedNoise(key).fingerprint()})", False
    if not raw:
        label = (
            "public DEMO key bytes(32): not secret, for demonstration only "
            f"(set {KEY_ENV} or {KEY_FILE_ENV} for a private run)"
        )
        return DEMO_KEY, label, True
    fix = (
        f"set {KEY_ENV} to 64 hex characters (32 bytes), e.g. "
        "`python -c 'import secrets; print(secrets.token_hex(32))'`, or unset it for the demo key"
    )
    if len(raw) != 64:
        raise click.UsageError(f"{KEY_ENV} has {len(raw)} characters, must have 64: {fix}")
    try:
        key = bytes.fromhex(raw)
    except ValueError:
        raise click.UsageError(f"{KEY_ENV} must contain only hex digits: {fix}") from None
    return key, f"from {KEY_ENV} (fingerprint {KeyedNoise(key).fingerprint()})", False


def _print_key(console: Console, label: str, is_demo: bool) -> None:
    if is_demo:
        console.print(f"[bold yellow]WARNING[/]: noise key is the {label}")
    else:
        console.print(f"noise key: {label}")


# -- inputs --------------------------------------------------------------------------------------


@dataclass
class Source:
    """One input of ``run`` or ``eval``: records and their schema, or points in [0,1]^d."""

    label: str
    names: tuple[str, ...]
    schema: Schema | None = None  # maps ``records`` to [0,1]^d
    records: list[Any] | None = None
    points: np.ndarray | None = None  # already in [0,1]^d
    units: Schema | None = None  # the user's schema: points back to original units

    @property
    def n(self) -> int:
        """Number of input records (valid or not)."""
        if self.records is not None:
            return len(self.records)
        return 0 if self.points is None else len(self.points)

    @property
    def d(self) -> int:
        """Dimension of the points."""
        return len(self.names)

    def batches(
        self, size: int
    ) -> Iterator[tuple[int, np.ndarray, ClipReport | None, list[tuple[int, str]]]]:
        """(records in the batch, valid points, clip report, rejects with input indices)."""
        for start in range(0, self.n, size):
            if self.records is None:
                chunk = self.points[start:start + size]  # type: ignore[index]
                yield len(chunk), chunk, None, []
                continue
            part = self.records[start:start + size]
            points, report, rejects = self.schema.split_valid(part)  # type: ignore[union-attr]
            yield len(part), points, report, [(start + i, why) for i, why in rejects]

    def valid_points(self) -> np.ndarray:
        """All valid records as points in [0,1]^d, in input order (what the synthesizer sees)."""
        parts = [points for _, points, _, _ in self.batches(50_000)]
        return np.concatenate(parts) if parts else np.zeros((0, self.d))


def _csv_value(text: str) -> Any:
    """A CSV cell as a float when it parses as one, else the text (rejected by the schema)."""
    try:
        return float(text)
    except ValueError:
        return text


def read_records(path: Path) -> list[Any]:
    """Records of a CSV file with a header, or of NDJSON (one object per line); ``.gz`` allowed.

    Empty CSV cells are missing fields; an NDJSON line that is not valid JSON becomes ``None``,
    which the schema rejects as "record must be a mapping".
    """
    return read_table(path)[0]


def read_table(path: Path) -> tuple[list[Any], tuple[str, ...] | None]:
    """(records, the CSV header's column names, or None for NDJSON) of ``path``."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8-sig", newline="") as f:  # type: ignore[operator]
        text = f.read()
    if text.lstrip()[:1] in ("{", "["):
        records: list[Any] = []
        for line in text.splitlines():
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    records.append(None)
        return records, None
    rows = csv.DictReader(text.splitlines())
    header = tuple(name for name in (rows.fieldnames or ()) if name)
    return [{k: _csv_value(v) for k, v in row.items() if k is not None and v not in (None, "")}
            for row in rows], header


def load_source(
    input_path: Path | None, schema_path: Path | None, dataset: str | None, points: int,
    seed: int, limit: int | None,
) -> Source:
    """The input named by the options: a file, a data set, or the generated stream."""
    if input_path is not None and dataset is not None:
        raise click.UsageError("give either --input or --dataset, not both")
    if schema_path is not None and input_path is None:
        raise click.UsageError("--schema maps the columns of an --input file; add --input FILE")
    if input_path is not None:
        source = _file_source(input_path, schema_path)
    elif dataset == "gowalla":
        path = bench_accuracy.GOWALLA
        if not path.is_file():
            raise click.UsageError(
                f"dataset gowalla: {path} is missing; it lives in ../shared/data/gowalla_nyc "
                "(see ../shared/data/README.md), or pass --input FILE"
            )
        source = Source(f"Gowalla NYC check-ins ({path}), time order, lon/lat scaled to [0,1]",
                        ("x (lon)", "y (lat)"), points=bench_accuracy.load_gowalla(path))
    else:
        source = Source(
            f"generated stream: {points:,} points, 4 drifting Gaussian blobs (seed {seed})",
            ("x", "y"), points=bench_accuracy.drifting_blobs(points, seed))
    if limit is not None:
        if source.records is not None:
            source.records = source.records[:limit]
        else:
            source.points = source.points[:limit]  # type: ignore[index]
        source.label += f", first {limit:,} records"
    return source


def _file_source(path: Path, schema_path: Path | None) -> Source:
    """The records of ``path`` under a declared schema, or under the CSV header's columns.

    A schema is never inferred from values (DESIGN §3 "What may depend on the data"): without
    ``--schema`` every column named in the CSV header is a coordinate in [0,1], and a row whose
    value does not parse as a number there is rejected (dead-lettered), never a column dropped.
    NDJSON has no header, so it needs ``--schema``.
    """
    records, header = read_table(path)
    if schema_path is not None:
        schema = Schema.from_json_file(schema_path)
        label = f"{path} ({len(records):,} records), schema {schema_path}"
        return Source(label, schema.names, schema=schema, records=records, units=schema)
    if header is None:
        raise click.UsageError(
            f"{path} is NDJSON, which names no columns up front; pass --schema FILE to declare "
            "the columns and their bounds (schemas/example-schema.json shows the format)"
        )
    if not header:
        raise click.UsageError(f"{path} has no CSV header; pass --schema FILE")
    schema = Schema(tuple(Column(name, 0.0, 1.0) for name in header))
    label = (f"{path} ({len(records):,} records), header columns {', '.join(header)} taken as "
             "coordinates in [0,1] (no --schema; a row that does not parse is rejected)")
    return Source(label, header, schema=schema, records=records)


def source_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The input options shared by ``run`` and ``eval``."""
    options = [
        click.option("--input", "input_path",
                     type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="CSV with a header, or NDJSON of objects (.gz allowed)."),
        click.option("--schema", "schema_path",
                     type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="Schema JSON mapping named columns to [0,1]^d (schemas/). Without "
                          "it, every column of the CSV header is a coordinate in [0,1] (never "
                          "inferred from values); NDJSON needs it."),
        click.option("--dataset", type=click.Choice(["gowalla"]),
                     help="A data set of ../shared/data instead of --input (time order)."),
        click.option("--points", type=click.IntRange(min=1), default=RUN_POINTS,
                     show_default=True, help="Size of the generated stream (the default input)."),
        click.option("--seed", type=int, default=0, show_default=True,
                     help="Seed of the generated stream (not of the privacy noise: keyed)."),
        click.option("--limit", type=click.IntRange(min=1),
                     help="Use only the first N records of the input."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


# -- run -----------------------------------------------------------------------------------------


@dataclass
class RunLog:
    """What ``run`` fed and wrote: the valid points in order, release files, rejects, clips."""

    true: np.ndarray
    files: list[tuple[int, int, Path]]  # (sequence, records fed, path) per release
    rejected: int
    clips: ClipReport | None


def _write_release(release: Release, directory: Path, run_id: str,
                   release_every: int) -> tuple[int, int, Path]:
    """Write one release; returns (sequence, records fed so far, path).

    Releases come every ``release_every`` records, so release k follows k·release_every
    records (under add/remove, ``release.t`` is the noisy released size instead).
    """
    sequence = int(release.metadata["sequence"])
    path = directory / f"release-{sequence:06d}.bin"
    write_release_file(path, encode_release(release, run_id=run_id, partition=0,
                                            sequence=sequence))
    return sequence, sequence * release_every, path


def _feed(synth: OnlineSynthesizer, source: Source, out: Path, run_id: str,
          console: Console) -> RunLog:
    """Feed ``source`` in batches with a progress bar; write releases and dead letters."""
    releases_dir = out / "releases"
    releases_dir.mkdir(parents=True, exist_ok=True)
    for stale in releases_dir.glob("release-*.bin"):  # outputs of an earlier run
        stale.unlink()
    parts, files, rejected, clips = [], [], 0, None
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[releases]} releases"), TimeElapsedColumn())
    with (open(out / "dead-letter.ndjson", "w", encoding="utf-8") as dead,
          Progress(*columns, console=console) as progress):
        task = progress.add_task("records", total=source.n, releases=0)
        for size, points, report, rejects in source.batches(BATCH_RECORDS):
            for index, reason in rejects:  # the index and the rule broken, never the value
                line = json.dumps({"index": index, "reason": reason}, ensure_ascii=False)
                dead.write(line + "\n")
            rejected += len(rejects)
            if report is not None:
                clips = report if clips is None else clips + report
            parts.append(points)
            files += [_write_release(r, releases_dir, run_id, synth.release_every)
                      for r in synth.extend(points)]
            progress.update(task, advance=size, releases=len(files))
    true = np.concatenate(parts) if parts else np.zeros((0, source.d))
    return RunLog(true, files, rejected, clips)


def _w1_over_t(log: RunLog, w1_points: int) -> list[dict[str, Any]]:
    """W1 of ≈ CURVE_RELEASES evenly spaced releases (read back from disk) vs the true prefix."""
    picks = np.unique(np.linspace(0, len(log.files) - 1, CURVE_RELEASES).round().astype(int))
    curve = []
    for i in picks.tolist():
        sequence, t, path = log.files[i]
        release = read_release_file(path)
        w1 = bench_accuracy.w1_bracket(log.true[:t], release.points,
                                       max_points=min(CURVE_EXACT_POINTS, w1_points))
        curve.append({"sequence": sequence, "t": t, **w1})
    return curve


def _stride(points: np.ndarray, limit: int = PLOT_POINTS) -> np.ndarray:
    """At most ``limit`` points, evenly strided (deterministic; no random generator here)."""
    if len(points) <= limit:
        return points
    return points[np.linspace(0, len(points) - 1, limit).astype(int)]


def _plot_true_vs_synthetic(path: Path, true: np.ndarray, synth: np.ndarray, source: Source,
                            title: str) -> None:
    """Scatter (d ≥ 2: first two coordinates) or histograms (d = 1), true next to synthetic."""
    if source.units is not None:
        true, synth = source.units.from_unit(true), source.units.from_unit(synth)
    true, synth = _stride(true), _stride(synth)
    fig = bench_accuracy._figure(11 if source.d > 1 else 7, 5)
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


def _plot_w1_over_t(path: Path, curve: list[dict[str, Any]], title: str) -> None:
    """W1 bracket (sliced ≤ exact ≤ tree) of the evaluated releases against t."""
    fig = bench_accuracy._figure(7, 4.5)
    ax = fig.subplots()
    ts = [c["t"] for c in curve]
    ax.plot(ts, [c["tree_upper"] for c in curve], marker="v", label="tree upper bound")
    exact_label = "exact W1" + (f" (subsamples of {CURVE_EXACT_POINTS:,})"
                                if any(c["exact_subsampled"] for c in curve) else "")
    ax.plot(ts, [c["exact"] for c in curve], marker="o", label=exact_label)
    ax.plot(ts, [c["sliced_lower"] for c in curve], marker="^", label="sliced lower bound")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("t (records in the release)")
    ax.set_ylabel("ℓ∞ W1 on [0,1]^d")
    ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=110)


def _summary(synth: OnlineSynthesizer, source: Source, log: RunLog, final: dict[str, Any],
             curve: list[dict[str, Any]], key_label: str) -> dict[str, Any]:
    release = synth.release()
    clips = log.clips
    return {
        "not_private": "computed from the raw input for evaluation; do not publish",
        "source": source.label, "d": source.d, "columns": list(source.names),
        "records_read": source.n, "records_accepted": synth.t, "rejected": log.rejected,
        "clipped": (clips.total if clips is not None else 0) + synth.clipped,
        "clipped_per_column": clips.per_column if clips is not None else {},
        "t": release.t, "releases": len(log.files), "depth": release.depth,
        "epsilon": synth.epsilon, "neighbours": "replace", "schedule": synth.schedule_name,
        "worst_case_loss": synth.worst_case_loss, "release_every": synth.release_every,
        "max_depth": synth.max_depth, "key": key_label,
        "w1_final": final, "w1_over_t": curve,
    }


@main.command()
@source_options
@click.option("--epsilon", type=float, default=1.0, show_default=True,
              help="Total privacy budget ε (replacement of one record).")
@click.option("--release-every", type=click.IntRange(min=1), default=1000, show_default=True,
              help="A tick, and a release, every N records.")
@click.option("--max-depth", type=click.IntRange(0, 63), default=20, show_default=True,
              help="Deepest tree level (bounds memory; accuracy plateaus at the leaf size).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("dpsynth-out"), show_default=True, help="Output directory.")
@click.option("--w1-points", type=click.IntRange(min=100), default=5000, show_default=True,
              help="Exact W1 of the final release on at most this many points (subsampled "
                   "beyond, and summary.json says so).")
@click.option("--run-id", default="local", show_default=True,
              help="run_id written in every release record.")
@click.option("--schedule",
              type=click.Choice(["auto", "accurate", "paper", "adaptive", "blocks"]),
              default="auto", show_default=True,
              help="auto: adaptive for d >= 2 or add/remove, else accurate (the measured "
                   "winners); adaptive: PrivTree histograms of doubling step blocks; blocks: "
                   "PMM ones; accurate: GLS-pooled per-level histograms; paper: HVZ Alg 1.")
@click.option("--neighbours", type=click.Choice(["replace", "add_remove"]), default="replace",
              show_default=True,
              help="replace: the papers' notion (t public). add_remove is refused here: "
                   "steps of --release-every records would reveal the private count.")
@click.option("--fresh", type=click.FloatRange(0.0, 0.99), default=0.0, show_default=True,
              help="accurate: budget share of a fresh counter, so releases move within a level.")
@fail_on_dpsynth_error
def run(input_path: Path | None, schema_path: Path | None, dataset: str | None, points: int,
        seed: int, limit: int | None, epsilon: float, release_every: int, max_depth: int,
        out: Path, w1_points: int, run_id: str, schedule: str, neighbours: str,
        fresh: float) -> None:
    """Run the online synthesizer embedded (no Kafka) and write releases, a summary and plots.

    The default input is a generated stream of 20,000 points from drifting Gaussian blobs.
    summary.json and the two PNGs compare releases with the raw input: evaluation only, not
    private. The releases in OUT/releases are the ε-DP output.
    """
    if neighbours == "add_remove":  # privacy: P9 (a step may end only on a public clock)
        raise click.UsageError(
            "--neighbours add_remove: dpsynth run ends a step every --release-every records, "
            "which reveals the private record count; run with --neighbours replace, or feed "
            "steps on a public clock with the library (OnlineSynthesizer.add and .step)"
        )
    console = Console()
    key, key_label, is_demo = resolve_key()
    _print_key(console, key_label, is_demo)
    source = load_source(input_path, schema_path, dataset, points, seed, limit)
    options: dict[str, Any] = {"fresh": fresh} if schedule == "accurate" else {}
    synth = OnlineSynthesizer(source.d, epsilon, key, release_every, schedule=schedule,
                              max_depth=max_depth, neighbours=neighbours, **options)
    console.print(f"input: {source.label}")
    schedule = synth.schedule_name  # "auto" resolved
    console.print(f"d = {source.d}, ε = {epsilon:g} ({schedule} schedule), a release every "
                  f"{release_every:,} records, max depth {max_depth}; writing to {out}/")
    out.mkdir(parents=True, exist_ok=True)
    log = _feed(synth, source, out, run_id, console)
    console.print(f"{synth.t:,} records accepted, {log.rejected:,} rejected "
                  f"(dead-letter.ndjson), {len(log.files):,} releases in {out / 'releases'}/")
    if not log.files:
        console.print(f"[yellow]no release: fewer than --release-every ({release_every:,}) "
                      "valid records; no summary or plots written[/]")
        return
    release = synth.release()
    fed = log.files[-1][1]  # records behind the last release (its t may be a noisy size)
    with console.status("evaluating: exact W1 (POT), tree and sliced bounds…"):
        final = bench_accuracy.w1_bracket(log.true[:fed], release.points,
                                          max_points=w1_points)
        curve = _w1_over_t(log, w1_points)
    summary = _summary(synth, source, log, final, curve, key_label)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    short_key = "public demo key" if is_demo else "private key"
    title = f"dpsynth run: t = {release.t:,}, ε = {epsilon:g}, {schedule} schedule, {short_key}"
    _plot_true_vs_synthetic(out / "true-vs-synthetic.png", log.true[:fed],
                            release.points, source, title)
    _plot_w1_over_t(out / "w1-over-t.png", curve, title)
    _print_w1(console, release.t, final)
    console.print(f"wrote {out / 'summary.json'}, {out / 'true-vs-synthetic.png'}, "
                  f"{out / 'w1-over-t.png'}, {out / 'dead-letter.ndjson'}")
    console.print("[dim]summary.json and the plots use the raw input: evaluation only, do not "
                  "publish them; the releases are the ε-DP output.[/]")


def _print_w1(console: Console, t: int, w1: dict[str, Any]) -> None:
    sample = (f"on random subsamples of {w1['exact_points']:,} points (of {t:,})"
              if w1["exact_subsampled"] else f"on all {t:,} points")
    console.print(
        f"final release t = {t:,}: ℓ∞ W1 to the true prefix {w1['exact']:.4f} (exact, {sample}); "
        f"sliced lower bound {w1['sliced_lower']:.4f}, tree upper bound {w1['tree_upper']:.4f}"
    )


# -- inspect and eval ----------------------------------------------------------------------------


def _schema_or_none(schema_path: Path | None, d: int) -> Schema | None:
    if schema_path is None:
        return None
    schema = Schema.from_json_file(schema_path)
    if schema.d != d:
        raise click.UsageError(f"--schema has {schema.d} columns, the release has d = {d}")
    return schema


@main.command()
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


@main.command(name="eval")
@click.argument("release_path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@source_options
@click.option("--w1-points", type=click.IntRange(min=100), default=5000, show_default=True,
              help="Exact W1 on at most this many points (subsampled beyond, and said).")
@click.option("--boxes", type=click.IntRange(min=1), default=200, show_default=True,
              help="Random query boxes per size (small, medium, large).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the results to this JSON file.")
@fail_on_dpsynth_error
def evaluate(release_path: Path, input_path: Path | None, schema_path: Path | None,
             dataset: str | None, points: int, seed: int, limit: int | None, w1_points: int,
             boxes: int, json_path: Path | None) -> None:
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
    fed = release.t  # under add/remove t is a noisy size: the records are step × release_every
    if release.metadata.get("neighbours") == "add_remove":
        fed = int(release.metadata["step"]) * int(release.metadata["release_every"])
    if len(true) < fed:
        raise click.UsageError(
            f"the input has {len(true):,} valid records, fewer than the release's t = "
            f"{fed:,}: is it the input the release was made from?"
        )
    console.print(f"release {release_path}: t = {release.t:,}, depth {release.depth}")
    console.print(f"input: {source.label}")
    with console.status("evaluating: exact W1 (POT), bounds, i.i.d. floor, range queries…"):
        result = bench_accuracy.evaluate_release(true[:fed], release.points,
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


# -- bench ---------------------------------------------------------------------------------------


@main.command()
@click.argument(
    "which", default="all",
    type=click.Choice(["noise", "level", "all", "accuracy", "rate", "throughput", "modes",
                       "offline", "offline-cost", "peer"]),
)
@click.option(
    "--repeats", type=click.IntRange(min=1), default=5, show_default=True,
    help="Repeats per measurement (noise, level, throughput); medians are reported.",
)
@click.option("--seeds", type=click.IntRange(min=1), default=3, show_default=True,
              help="accuracy: seeds (noise keys and uniform streams) per data set and size.")
@click.option("--peak-records", type=click.IntRange(min=0), default=10_000_000,
              show_default=True,
              help="throughput: peak memory of a run to this t, in a fresh process (0: skip).")
@click.option("--plots", "plots_dir", type=click.Path(file_okay=False, path_type=Path),
              help="accuracy, rate: save PNG plots in this directory (e.g. docs/img).")
@click.option(
    "--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the raw results (every repeat or seed) to this JSON file.",
)
@click.option("--schedule", type=click.Choice(["paper", "accurate"]), default="paper",
              show_default=True, help="throughput: the schedule measured.")
def bench(which: str, repeats: int, seeds: int, peak_records: int, plots_dir: Path | None,
          json_path: Path | None, schedule: str) -> None:
    """Benchmarks: noise sampler (noise), one LevelCounters tick (level), noise + level (all),
    online vs PMM vs floor (accuracy), W1 rate in t (rate), ingest and memory (throughput).

    Speeds are medians over repeats and ratios to baselines timed in the same run.
    """
    console = Console()
    machine = benchmarks.machine_info()
    results: dict[str, Any] = {}
    if which in ("noise", "all"):
        with console.status(f"noise: {repeats} repeats (OpenDP takes seconds per repeat)…"):
            results["noise"] = benchmarks.run_noise_bench(repeats)
        benchmarks.print_noise_report(results["noise"], console)
    if which in ("level", "all"):
        with console.status(f"level: {repeats} repeats of 2^20 cells…"):
            results["level"] = benchmarks.run_level_bench(repeats)
        benchmarks.print_level_report(results["level"], console)
    if which == "accuracy":
        results["accuracy"] = _bench_accuracy(console, seeds, plots_dir)
    if which == "rate":
        with console.status("rate: d = 1, 2, 3 and t = 10^3 … 10^6…"):
            rows = bench_accuracy.rate_table()
        bench_accuracy.print_rate_report(rows, console)
        results["rate"] = {"rows": rows}
        if plots_dir is not None:
            console.print(f"plot: {bench_accuracy.plot_rate(rows, plots_dir)}")
    if which == "throughput":
        results["throughput"] = _bench_throughput(console, repeats, peak_records, schedule)
    if which == "modes":
        results["modes"] = _bench_modes(console, seeds, plots_dir)
    if which == "peer":
        from dpsynth import bench_peer  # issue 8: add/remove, adaptive vs PMM and PHDStream

        with console.status(f"peer: uniform + gowalla to t = 10^5, {seeds} seeds…"):
            rows = bench_peer.peer_rows(seeds=seeds)
        summary = bench_peer.summarise_peer(rows)
        bench_peer.print_peer(summary, console)
        results["peer"] = {"rows": rows, "summary": summary}
    if which == "offline":
        from dpsynth import bench_offline  # issue 6: PMM, PSMM, lowdim

        results["offline"] = bench_offline.run(console, seeds)
    if which == "offline-cost":
        from dpsynth import bench_offline

        results["offline-cost"] = bench_offline.run_cost(console)
    for result in results.values():
        result.setdefault("machine", machine)
    console.print(
        f"[dim]{machine['date']}; nproc {machine['nproc']}, load {machine['loadavg_1m']}; "
        f"python {machine['python']}, numpy {machine['numpy']}, numba {machine['numba']}, "
        f"opendp {machine['opendp']}[/]"
    )
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(results, indent=2) + "\n")
        console.print(f"raw results written to {json_path}")


def _bench_accuracy(console: Console, seeds: int, plots_dir: Path | None) -> dict[str, Any]:
    if not bench_accuracy.GOWALLA.is_file():
        console.print(f"[yellow]{bench_accuracy.GOWALLA} is missing: uniform data only[/]")
    with console.status(f"accuracy: uniform + gowalla, t = 2·10^4 and 10^5, {seeds} seeds…"):
        rows = bench_accuracy.accuracy_table(seeds=seeds)
    bench_accuracy.print_accuracy_report(rows, console)
    if plots_dir is not None:
        console.print(f"plot: {bench_accuracy.plot_accuracy(rows, plots_dir)}")
    return {"rows": rows, "summary": bench_accuracy.summarise_accuracy(rows)}


def _bench_throughput(
    console: Console, repeats: int, peak_records: int, schedule: str
) -> dict[str, Any]:
    with console.status(f"throughput ({schedule}): {repeats} runs of 10^6 records…"):
        result = bench_accuracy.throughput(repeats=repeats, schedule=schedule)
    if peak_records:
        with console.status(f"peak memory: one run to t = {peak_records:,} in a new process…"):
            result["peak"] = bench_accuracy.peak_memory(peak_records, schedule=schedule)
    bench_accuracy.print_throughput_report(result, console)
    return result


def _bench_modes(console: Console, seeds: int, plots_dir: Path | None) -> dict[str, Any]:
    """Issue 5: accurate vs paper vs PMM vs PMM-rep vs floor (d = 2; d = 1, 3 on uniform)."""
    with console.status(f"modes: d = 2, t = 4000 / 2·10^4 / 10^5, {seeds} seeds…"):
        rows = bench_modes.mode_rows(bench_modes.default_datasets(), (4000, 20_000, 100_000),
                                     seeds, dims=(2,))
    with console.status("modes: d = 1 and 3 on uniform data, t = 10^4 and 10^5…"):
        # d = 1 and 3 are a side table: min(seeds, 3) seeds keep the run under half an hour
        rows += bench_modes.mode_rows(bench_modes.default_datasets(include_gowalla=False),
                                      (10_000, 100_000), min(seeds, 3), dims=(1, 3))
    summary = bench_modes.summarise(rows)
    bench_modes.print_summary(summary, console)
    if plots_dir is not None:
        console.print(f"plot: {bench_modes.plot_summary(summary, plots_dir)}")
    return {"rows": rows, "summary": summary}


# -- demo --------------------------------------------------------------------------------------


def _demo_noise() -> tuple[KeyedNoise, str, bool]:
    """The demo's noise source, a printable label and whether it is the public demo key."""
    key, label, is_demo = resolve_key()
    return KeyedNoise(key), label, is_demo


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


@main.command()
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), default=Path("dpsynth-out"),
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


# -- the Kafka operator (dpsynth.stream; Faust and confluent-kafka are imported lazily) ---------

from dpsynth.stream.bench_kafka import bench_kafka  # noqa: E402
from dpsynth.stream.commands import worker  # noqa: E402
from dpsynth.stream.commands_io import consume, produce  # noqa: E402

main.add_command(worker)
main.add_command(bench_kafka, name="bench-kafka")
main.add_command(produce)
main.add_command(consume)

# -- offline snapshots (issue 6: PMM, PSMM, low-dimensional synthesis) ---------------------------

from dpsynth.cli_snapshot import snapshot  # noqa: E402

main.add_command(snapshot)

# -- tabular streams (issue 7: paper 003 select–measure–fit) --------------------------------------

from dpsynth.cli_tabular import tabular  # noqa: E402

main.add_command(tabular)
