"""``dpsynth run``: the online synthesizer embedded (no Kafka), with releases, summary and plots.

Layer: adapter. Writes every release to ``OUT/releases/release-{sequence:06d}.bin`` (release
format v1), with ``--points-format arrow`` its points in units to
``OUT/points/points-{sequence:06d}.arrow`` (Arrow IPC file), the schema of their units to
``OUT/schema.json`` (what ``dpsynth view --folder OUT`` reads), rejected records to
``OUT/dead-letter.ndjson`` (index and reason, never the value), and ``OUT/summary.json``,
``OUT/true-vs-synthetic.png``, ``OUT/w1-over-t.png`` — evaluation artefacts computed from
the raw input, not private. Only the releases (and their points) are ε-DP. Steps: every
``--release-every`` records (replacement), or the buckets of a declared time column
(:mod:`~dpsynth.cli.timesteps`; the only way under add/remove, docs/privacy.md P11).

Standard output says only what the notion makes public (settings, key fingerprint, the number
of releases and the released t, paths); the true counts, rejection reasons, clipping and the
W1 evaluation go to standard error as operator diagnostics. Under add/remove the exit status
depends on the options and the input's header only; under replacement (the count and, by the
notion's assumption, each record's validity are public: docs/privacy.md) a run that accepts no
record or makes no release exits 1. A reused ``--out`` is emptied of the earlier run's outputs
first; the key is bound to its input (:mod:`dpsynth.keybinding`, P13).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from dpsynth.bounding import split_user_records
from dpsynth.cli.common import (
    Source,
    bind_key_to_input,
    load_source,
    print_key,
    resolve_key,
    source_options,
    stderr_console,
)
from dpsynth.cli.errors import EXIT_STATUS_HELP, InputError, fail_on_dpsynth_error
from dpsynth.cli.options import declared_options
from dpsynth.cli.outputs import Diagnostics, prepare_out_dir
from dpsynth.cli.run_plots import (
    CURVE_EXACT_POINTS,
    plot_true_vs_synthetic,
    plot_w1_over_t,
    print_w1,
)
from dpsynth.cli.timesteps import TimeSteps, time_options, time_steps
from dpsynth.contract import feed
from dpsynth.errors import ConfigError
from dpsynth.eval.report import w1_bracket
from dpsynth.online.mechanism import step_mechanisms, takes_steps
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import Release, encode_release, read_release_file, write_release_file
from dpsynth.release.points_arrow import pyarrow_module, write_points_file
from dpsynth.schema import Column, Schema
from dpsynth.settings import SynthesisSettings, option_name

BATCH_RECORDS = 2_000  # records per call of OnlineSynthesizer.extend (one progress step)
CURVE_RELEASES = 10  # releases evaluated for w1-over-t.png
#: What ``run`` writes under ``--out`` (a reused directory is emptied of these first).
RUN_OUTPUTS = ("releases/release-*.bin", "points/points-*.arrow", "schema.json",
               "dead-letter.ndjson", "summary.json", "true-vs-synthetic.png", "w1-over-t.png")
#: Options that do not shape the releases (where outputs go, evaluation) or that name the
#: input (bound as the input instead): a key may recompute its run with other values of these.
NOT_SETTINGS = ("input_path", "dataset", "points", "seed", "limit", "out", "w1_points",
                "run_id", "report", "points_format")


@dataclass
class RunLog:
    """What ``run`` fed and wrote: the valid points in order, release files, diagnostics."""

    true: np.ndarray
    files: list[tuple[int, int, Path]]  # (sequence, records fed, path) per release
    diagnostics: Diagnostics


@dataclass(frozen=True)
class Outputs:
    """Where ``run`` writes: OUT/releases/, and OUT/points/ with ``--points-format arrow``."""

    out: Path
    run_id: str
    schema: Schema  # the points' units and column names (OUT/schema.json)
    points: bool = False

    @property
    def releases(self) -> Path:
        return self.out / "releases"

    @property
    def points_dir(self) -> Path:
        return self.out / "points"

    def prepare(self) -> None:
        """Empty OUT of an earlier run's outputs (anything else: refused), create the folders,
        write OUT/schema.json."""
        prepare_out_dir(self.out, RUN_OUTPUTS)
        self.releases.mkdir(parents=True, exist_ok=True)
        if self.points:
            self.points_dir.mkdir(parents=True, exist_ok=True)
        (self.out / "schema.json").write_text(json.dumps(self.schema.to_dict(), indent=2) + "\n")


def _write_release(release: Release, outputs: Outputs) -> tuple[int, int, Path]:
    """Write one release (and its points); returns (sequence, records behind it, path).

    The records are ``release.t``: the count under replacement; a step feed (add/remove:
    a noisy size) counts its own instead.
    """
    sequence = int(release.metadata["sequence"])
    path = outputs.releases / f"release-{sequence:06d}.bin"
    write_release_file(path, encode_release(release, run_id=outputs.run_id, partition=0,
                                            sequence=sequence))
    if outputs.points:  # post-processing: the release's points in units (--points-format)
        write_points_file(outputs.points_dir / f"points-{sequence:06d}.arrow", release,
                          outputs.schema, run_id=outputs.run_id, partition=0)
    return sequence, int(release.t), path


def _feed(synth: OnlineSynthesizer, source: Source, outputs: Outputs,
          console: Console) -> RunLog:
    """Feed ``source`` in batches with a progress bar; write releases and dead letters."""
    out = outputs.out
    parts: list[np.ndarray] = []
    files: list[tuple[int, int, Path]] = []
    diagnostics = Diagnostics(read=source.n, dead_letter=out / "dead-letter.ndjson")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[releases]} releases"), TimeElapsedColumn())
    with (open(out / "dead-letter.ndjson", "w", encoding="utf-8") as dead,
          Progress(*columns, console=console) as progress):
        task = progress.add_task("records", total=source.n, releases=0)
        sizes: list[int] = []

        def chunks() -> Iterator[tuple[np.ndarray, Any]]:
            for size, points, report, rejects, users in source.batches(BATCH_RECORDS):
                for index, reason in rejects:  # the index and the rule broken, never the value
                    line = json.dumps({"index": index, "reason": reason}, ensure_ascii=False)
                    dead.write(line + "\n")
                diagnostics.reject(reason for _, reason in rejects)
                diagnostics.clip(report)
                sizes.append(size)
                yield points, users

        for points, releases in feed(synth, chunks(), steps=False):
            parts.append(_counted(synth, points))
            files += [_write_release(r, outputs) for r in releases]
            progress.update(task, advance=sizes[-1], releases=len(files))
    true = np.concatenate(parts) if parts else np.zeros((0, source.d))
    return RunLog(true, files, diagnostics)


def _counted(synth: OnlineSynthesizer, points: np.ndarray) -> np.ndarray:
    """The points of the latest call that the synthesizer counted (within their users'
    bounds under the privacy unit "user"): what its releases describe."""
    return points if synth.users is None else points[synth.users.last_admitted]


def _feed_steps(synth: OnlineSynthesizer, source: Source, steps: TimeSteps, outputs: Outputs,
                console: Console) -> RunLog:
    """One step per declared time bucket (public time): add its records, then step()."""
    out = outputs.out
    records = source.records or []
    bucket, rejects = steps.buckets(records)
    timed = np.flatnonzero(bucket >= 0)
    schema = source.schema
    assert schema is not None  # records come with their schema
    points, clips, bad, ids = (split_user_records(schema, [records[i] for i in timed])
                               if schema.user_column else
                               (*schema.split_valid([records[i] for i in timed]), None))
    rejects += [(int(timed[j]), why) for j, why in bad]
    keep = np.ones(timed.size, bool)
    keep[[j for j, _ in bad]] = False
    order = np.argsort(bucket[timed[keep]], kind="stable")  # time order, input order within
    points, bucket = points[order], bucket[timed[keep]][order]
    users = None if ids is None else [ids[i] for i in order]
    with open(out / "dead-letter.ndjson", "w", encoding="utf-8") as dead:
        for index, reason in sorted(rejects):  # the index and the rule broken, never the value
            dead.write(json.dumps({"index": index, "reason": reason}, ensure_ascii=False) + "\n")
    n_steps = steps.n_steps(bucket)
    bounds = np.searchsorted(bucket, np.arange(n_steps + 1))
    files, counted = [], []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("steps", total=n_steps)
        buckets = ((points[s], None if users is None else users[s]) for s in (
            slice(bounds[k], bounds[k + 1]) for k in range(n_steps)))
        # privacy: P11 (a step ends at the end of a declared time bucket)
        for step_points, (release,) in feed(synth, buckets, steps=True):
            counted.append(_counted(synth, step_points))
            sequence, _, path = _write_release(release, outputs)
            files.append((sequence, sum(len(c) for c in counted), path))
            progress.advance(task)
    true = np.concatenate(counted) if counted else np.zeros((0, source.d))
    diagnostics = Diagnostics(read=source.n, clips=clips,
                              dead_letter=out / "dead-letter.ndjson")
    diagnostics.reject(reason for _, reason in rejects)
    return RunLog(true, files, diagnostics)


def _units(source: Source) -> Schema:
    """The schema of the points' units: the user's, else the columns in [0,1]."""
    if source.units is not None:
        return source.units
    return Schema(tuple(Column(name, 0.0, 1.0) for name in source.names))


def _w1_over_t(log: RunLog, w1_points: int) -> list[dict[str, Any]]:
    """W1 of ≈ CURVE_RELEASES evenly spaced releases (read back from disk) vs the true prefix."""
    picks = np.unique(np.linspace(0, len(log.files) - 1, CURVE_RELEASES).round().astype(int))
    curve = []
    for i in picks.tolist():
        sequence, t, path = log.files[i]
        release = read_release_file(path)
        if t == 0 or release.t == 0:  # no W1 of an empty set (a noisy size of 0, P9)
            continue
        w1 = w1_bracket(log.true[:t], release.points,
                        max_points=min(CURVE_EXACT_POINTS, w1_points))
        curve.append({"sequence": sequence, "t": t, **w1})
    return curve


def _summary(synth: OnlineSynthesizer, source: Source, log: RunLog, final: dict[str, Any],
             curve: list[dict[str, Any]], key_label: str,
             steps: TimeSteps | None) -> dict[str, Any]:
    release = synth.release()
    clips = log.diagnostics.clips
    return {
        "not_private": "computed from the raw input for evaluation; do not publish",
        "source": source.label, "d": source.d, "columns": list(source.names),
        "records_read": source.n, "records_accepted": synth.t,
        "rejected": log.diagnostics.rejected,
        "rejection_reasons": dict(log.diagnostics.reasons.most_common()),
        "clipped": (clips.total if clips is not None else 0) + synth.clipped,
        "clipped_per_column": clips.per_column if clips is not None else {},
        "t": release.t, "releases": len(log.files), "depth": release.depth,
        "epsilon": synth.epsilon, "neighbours": synth.neighbours, "mechanism": synth.mechanism,
        "worst_case_loss": synth.worst_case_loss, "privacy_unit": synth.privacy_unit,
        **({} if synth.users is None else {
            "max_contributions": synth.users.max_contributions,
            "max_contributions_per_step": synth.users.per_step,
            "records_dropped": synth.dropped}),
        "release_every": synth.release_every if steps is None else None,
        "release_growth": synth.release_growth if steps is None else None,
        "time_steps": None if steps is None else {
            "column": steps.column, "origin": steps.origin, "period": steps.period,
            "end": steps.end, "steps": len(log.files)},
        "records_behind_releases": [[s, fed] for s, fed, _ in log.files],
        "max_depth": synth.max_depth, "key": key_label,
        "w1_final": final, "w1_over_t": curve,
    }


@click.command(epilog=EXIT_STATUS_HELP)
@source_options
@declared_options("epsilon", "release_every", "release_growth", "max_depth")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("dpsynth-out"), show_default=True,
              help="Output directory (new, or an earlier run's, whose outputs are replaced).")
@click.option("--w1-points", type=click.IntRange(min=100), default=5000, show_default=True,
              help="Exact W1 of the final release on at most this many points (subsampled "
                   "beyond, and summary.json says so).")
@click.option("--run-id", default=None,
              help="run_id written in every release record (default run-<key fingerprint>, "
                   "one per key: docs/privacy.md P13).")
@declared_options("mechanism", "neighbours")
@time_options
@declared_options("privacy_unit", "user_column", "max_contributions",
                  "max_contributions_per_step")
@declared_options("points_format")
@click.option("--report/--no-report", default=True, show_default=True,
              help="Write summary.json and the two plots (evaluation against the raw input, "
                   "not private); --no-report writes only the releases and dead-letter.ndjson.")
@fail_on_dpsynth_error
def run(input_path: Path | None, schema_path: Path | None, dataset: str | None, points: int,
        seed: int, limit: int | None, epsilon: float, release_every: int,
        release_growth: float, max_depth: int,
        out: Path, w1_points: int, run_id: str | None, mechanism: str, neighbours: str,
        time_column: str | None, time_origin: str | None, time_period: float | None,
        time_end: str | None, privacy_unit: str, user_column: str,
        max_contributions: int | None, max_contributions_per_step: int | None,
        points_format: str, report: bool) -> None:
    """Run the online synthesizer embedded (no Kafka) and write releases, a summary and plots.

    The default input is a generated stream of 20,000 points from drifting Gaussian blobs.
    summary.json and the two PNGs compare releases with the raw input: evaluation only, not
    private. The releases in OUT/releases are the ε-DP output. Standard output says only what
    the releases make public; true counts, rejections, clipping and W1 go to standard error.
    """
    params = click.get_current_context().params
    steps = time_steps(time_column, time_origin, time_period, time_end, neighbours)
    if steps is not None and not takes_steps(mechanism):
        raise click.UsageError(f"--time-column: --mechanism {mechanism} counts time in records; "
                               f"use --mechanism {', '.join(step_mechanisms())} (steps of "
                               "public time)")
    if steps is not None and release_growth:
        raise click.UsageError("--release-growth grows steps of --release-every records; with "
                               "--time-column a step is a period of time: drop one of them")
    console, err = Console(highlight=False, soft_wrap=True), stderr_console()
    noise_key = resolve_key()
    key, key_label, is_demo = noise_key.reveal(), noise_key.label(), noise_key.is_demo
    run_id = run_id or f"run-{noise_key.fingerprint}"  # privacy: P13 (one run id per key)
    try:  # a combination of options the library refuses is a usage error
        settings = SynthesisSettings.of(
            epsilon=epsilon, release_every=release_every, release_growth=release_growth,
            max_depth=max_depth,
            mechanism=mechanism, neighbours=neighbours, privacy_unit=privacy_unit,
            max_contributions=max_contributions,
            max_contributions_per_step=max_contributions_per_step,
            user_column=user_column or "", label=option_name)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    source = load_source(input_path, schema_path, dataset, points, seed, limit,
                         time_column=time_column, units=settings)
    options: dict[str, Any] = {}
    try:
        synth = settings.synthesizer(source.d, key, **options)
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    bind_key_to_input(noise_key, f"dpsynth run over {source.label}", source.identity, params,
                      NOT_SETTINGS, source.setting_files)  # privacy: P13 (one key, one input)
    print_key(console, noise_key)
    for warning in source.warnings:
        err.print(f"[bold yellow]{warning}[/]", highlight=False)
    console.print(f"input: {source.label}")
    mechanism = synth.mechanism  # "auto" resolved
    growth = f", growing to {release_growth:g}·t" if release_growth else ""
    when = (f"a release every {release_every:,} records{growth}" if steps is None else
            f"a release per {steps.period:,.10g} of {steps.column!r} from {time_origin}"
            + ("" if time_end is None else f" to {time_end}"))
    unit = ("" if synth.users is None else f", per user of at most "
            f"{synth.users.max_contributions} records (ε/k = {synth.users.record_epsilon:.3g} "
            "per record)")
    console.print(f"d = {source.d}, ε = {epsilon:g}{unit} ({mechanism} mechanism, "
                  f"{neighbours}), {when}, max depth {max_depth}; writing to {out}/")
    outputs = Outputs(out, run_id, _units(source), points=points_format != "none")
    if outputs.points:
        pyarrow_module()  # fail before the run when pyarrow is missing
    outputs.prepare()
    log = (_feed(synth, source, outputs, err) if steps is None else
           _feed_steps(synth, source, steps, outputs, err))
    log.diagnostics.accepted = int(synth.t)
    log.diagnostics.dropped = None if synth.users is None else int(synth.dropped)
    log.diagnostics.print(err)
    release = synth.release()
    if neighbours == "replace" and not (log.files and synth.t):  # the count is public here
        raise InputError(_no_release(log, release_every, steps))
    last = (f" (the last: t = {read_release_file(log.files[-1][2]).t:,})"
            if log.files and neighbours == "replace" else "")  # stdout: the same for neighbours
    console.print(f"{len(log.files):,} releases in {out / 'releases'}/{last}")
    if not report:
        return
    fed = log.files[-1][1] if log.files else 0  # records behind the last release
    if not fed or not release.t:  # private under add/remove: said on standard error only
        err.print("no summary or plots written: no valid record behind the last release, or "
                  "a noisy size of 0", highlight=False)
        return
    with err.status("evaluating: exact W1 (POT), tree and sliced bounds…"):
        final = w1_bracket(log.true[:fed], release.points, max_points=w1_points)
        curve = _w1_over_t(log, w1_points)
    summary = _summary(synth, source, log, final, curve, key_label, steps)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    short_key = "public demo key" if is_demo else "private key"
    title = f"dpsynth run: t = {release.t:,}, ε = {epsilon:g}, {mechanism} mechanism, {short_key}"
    plot_true_vs_synthetic(out / "true-vs-synthetic.png", log.true[:fed],
                            release.points, source, title)
    plot_w1_over_t(out / "w1-over-t.png", curve, title, final)
    print_w1(err, release.t, final, curve)
    console.print(f"wrote {out / 'summary.json'}, {out / 'true-vs-synthetic.png'}, "
                  f"{out / 'w1-over-t.png'} and {out / 'dead-letter.ndjson'}: evaluation and "
                  "diagnostics from the raw input, not private, do not publish them; the "
                  "releases are the ε-DP output")


def _no_release(log: RunLog, release_every: int, steps: TimeSteps | None) -> str:
    """Why a replacement run made no release (counts are public under replacement)."""
    d = log.diagnostics
    if not d.accepted:
        return (f"no release: none of the {d.read:,} records read was accepted (reasons above "
                f"and in {d.dead_letter}); check the input against its schema")
    if steps is None:
        return (f"no release: {d.accepted:,} valid records, fewer than --release-every "
                f"({release_every:,}); lower --release-every or give more records")
    return "no release: no time step holds a valid record; check --time-origin and --time-end"
