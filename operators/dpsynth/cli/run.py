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
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import numpy as np
from rich.console import Console

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
from dpsynth.cli.run_feed import Outputs, RunLog, feed_records, feed_steps
from dpsynth.cli.run_plots import (
    CURVE_EXACT_POINTS,
    plot_true_vs_synthetic,
    plot_w1_over_t,
    print_w1,
)
from dpsynth.cli.timesteps import TimeSteps, time_options, time_steps
from dpsynth.errors import ConfigError
from dpsynth.eval.report import w1_bracket
from dpsynth.online.mechanism import step_mechanisms, takes_steps
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import read_release_file
from dpsynth.release.points_arrow import pyarrow_module
from dpsynth.schema import Column, Schema
from dpsynth.settings import SynthesisSettings, option_name

T = TypeVar("T")
CURVE_RELEASES = 10  # releases evaluated for w1-over-t.png
#: Options that do not shape the releases (where outputs go, evaluation) or that name the
#: input (bound as the input instead): a key may recompute its run with other values of these.
NOT_SETTINGS = ("input_path", "dataset", "points", "seed", "limit", "out", "w1_points",
                "run_id", "report", "points_format")


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
    steps = _time_steps(time_column, time_origin, time_period, time_end, neighbours, mechanism,
                        release_growth)
    console, err = Console(highlight=False, soft_wrap=True), stderr_console()
    noise_key = resolve_key()
    run_id = run_id or f"run-{noise_key.fingerprint}"  # privacy: P13 (one run id per key)
    settings = _usage(lambda: SynthesisSettings.of(
        epsilon=epsilon, release_every=release_every, release_growth=release_growth,
        max_depth=max_depth, mechanism=mechanism, neighbours=neighbours,
        privacy_unit=privacy_unit, max_contributions=max_contributions,
        max_contributions_per_step=max_contributions_per_step, user_column=user_column or "",
        label=option_name))
    source = load_source(input_path, schema_path, dataset, points, seed, limit,
                         time_column=time_column, units=settings)
    synth = _usage(lambda: settings.synthesizer(source.d, noise_key.reveal()))
    bind_key_to_input(noise_key, f"dpsynth run over {source.label}", source.identity, params,
                      NOT_SETTINGS, source.setting_files)  # privacy: P13 (one key, one input)
    print_key(console, noise_key)
    for warning in source.warnings:
        err.print(f"[bold yellow]{warning}[/]", highlight=False)
    console.print(f"input: {source.label}")
    console.print(_announcement(synth, source, steps, time_origin, time_end, out))
    outputs = Outputs(out, run_id, _units(source), points=points_format != "none")
    log = _run(synth, source, steps, outputs, err)
    console.print(f"{len(log.files):,} releases in {out / 'releases'}/{_last(log, synth)}")
    if report:
        _report(synth, source, log, steps, out, w1_points, noise_key.label(),
                noise_key.is_demo, console, err)


def _usage(build: Callable[[], T]) -> T:
    """``build()``; a combination of options the library refuses is a usage error."""
    try:
        return build()
    except ConfigError as e:
        raise click.UsageError(str(e)) from None


def _time_steps(column: str | None, origin: str | None, period: float | None, end: str | None,
                neighbours: str, mechanism: str, release_growth: float) -> TimeSteps | None:
    """The declared time steps (``--time-column``), refused with a record-count mechanism or a
    growth of record-count steps."""
    steps = time_steps(column, origin, period, end, neighbours)
    if steps is not None and not takes_steps(mechanism):
        raise click.UsageError(f"--time-column: --mechanism {mechanism} counts time in records; "
                               f"use --mechanism {', '.join(step_mechanisms())} (steps of "
                               "public time)")
    if steps is not None and release_growth:
        raise click.UsageError("--release-growth grows steps of --release-every records; with "
                               "--time-column a step is a period of time: drop one of them")
    return steps


def _announcement(synth: OnlineSynthesizer, source: Source, steps: TimeSteps | None,
                  origin: str | None, end: str | None, out: Path) -> str:
    """The run's public settings, as standard output says them ("auto" resolved)."""
    growth = f", growing to {synth.release_growth:g}·t" if synth.release_growth else ""
    when = (f"a release every {synth.release_every:,} records{growth}" if steps is None else
            f"a release per {steps.period:,.10g} of {steps.column!r} from {origin}"
            + ("" if end is None else f" to {end}"))
    unit = ("" if synth.users is None else f", per user of at most "
            f"{synth.users.max_contributions} records (ε/k = {synth.users.record_epsilon:.3g} "
            "per record)")
    return (f"d = {source.d}, ε = {synth.epsilon:g}{unit} ({synth.mechanism} mechanism, "
            f"{synth.neighbours}), {when}, max depth {synth.max_depth}; writing to {out}/")


def _run(synth: OnlineSynthesizer, source: Source, steps: TimeSteps | None, outputs: Outputs,
         err: Console) -> RunLog:
    """Prepare OUT, feed the source (per record count, or per declared time step), print the
    operator diagnostics; a replacement run without a release is an input error."""
    if outputs.points:
        pyarrow_module()  # fail before the run when pyarrow is missing
    outputs.prepare()
    log = (feed_records(synth, source, outputs, err) if steps is None else
           feed_steps(synth, source, steps, outputs, err))
    log.diagnostics.accepted = int(synth.t)
    log.diagnostics.dropped = None if synth.users is None else int(synth.dropped)
    log.diagnostics.print(err)
    if synth.neighbours == "replace" and not (log.files and synth.t):  # the count is public
        raise InputError(_no_release(log, synth.release_every, steps))
    return log


def _last(log: RunLog, synth: OnlineSynthesizer) -> str:
    """`` (the last: t = N)`` under replacement (stdout: the same for either notion)."""
    if not log.files or synth.neighbours != "replace":
        return ""
    return f" (the last: t = {read_release_file(log.files[-1][2]).t:,})"


def _report(synth: OnlineSynthesizer, source: Source, log: RunLog, steps: TimeSteps | None,
            out: Path, w1_points: int, key_label: str, is_demo: bool, console: Console,
            err: Console) -> None:
    """summary.json and the two plots: evaluation against the raw input, not private."""
    release = synth.release()
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
    title = (f"dpsynth run: t = {release.t:,}, ε = {synth.epsilon:g}, {synth.mechanism} "
             f"mechanism, {short_key}")
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
