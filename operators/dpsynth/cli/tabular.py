"""``dpsynth tabular``: run paper 003's select–measure–fit synthesizer on a table (issue 7).

Layer: adapter. ``dpsynth tabular run`` streams a CSV + domain file (or the Adult data)
through :class:`~dpsynth.tabular.TabularSynthesizer` in public steps, writes releases in the
``tabular.v1`` format, the last synthetic table as CSV, per-step workload errors (evaluation
against the true data: not private, for the operator only) and a plot. Steps: under add/remove
(the default) the buckets of a declared time column (:mod:`~dpsynth.cli.timesteps`), since a
step of N rows would reveal the private count (docs/privacy.md P11; found by ``dpsynth audit``);
under replacement also batches of ``--release-every`` rows, paper 003's streams (e.g. Adult).
The reproduction benchmark of the paper's tables is ``python -m benchmarks tabular`` (outside the
package).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.progress import Progress

from dpsynth.cli.errors import fail_on_dpsynth_error
from dpsynth.cli.options import declared_options
from dpsynth.cli.timesteps import TimeSteps, time_options, time_steps
from dpsynth.contract import feed
from dpsynth.datasets import DATA_DIR_ENV, adult_dir, load_adult, make_stream
from dpsynth.release import encode_tabular_release
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.metrics import L1_METRICS, METRICS, step_metrics
from dpsynth.tabular.synthesizer import TabularSynthesizer


@click.group()
def tabular() -> None:
    """Synthetic tables over a finite domain (paper 003: select–measure–fit, Alg 3)."""


def _read_csv(path: Path) -> list[dict[str, Any]]:
    """The rows of a CSV file with a header (an unnamed first column is ignored)."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _encode(records: list[dict[str, Any]], domain: Domain) -> np.ndarray:
    """Codes of the valid records, in order; the invalid ones are skipped with a note."""
    codes, reasons = domain.encode(records)
    bad = [r for r in reasons if r is not None]
    if bad:
        click.echo(f"skipped {len(bad)} invalid records (first reason: {bad[0]})", err=True)
    return codes


def _timed_batches(records: list[dict[str, Any]], domain: Domain,
                   steps: TimeSteps) -> list[np.ndarray]:
    """One batch per declared time step (public time, P11): its valid records in file order."""
    bucket, rejects = steps.buckets(records)
    timed = [i for i in range(len(records)) if bucket[i] >= 0]
    codes, reasons = domain.encode([records[i] for i in timed])
    valid = np.array([timed[j] for j, r in enumerate(reasons) if r is None], np.int64)
    bad = [r for _, r in rejects] + [r for r in reasons if r is not None]
    if bad:
        click.echo(f"skipped {len(bad)} invalid records (first reason: {bad[0]})", err=True)
    step_of = bucket[valid] if valid.size else np.zeros(0, np.int64)
    n_steps = steps.n_steps(step_of)  # privacy: P11 (declared, never counted)
    return [codes[step_of == k] for k in range(n_steps)]


def _plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.5))
    steps = [r["step"] for r in rows]
    for ax, metric in zip(axes, METRICS, strict=True):
        ax.plot(steps, [r[metric] for r in rows])
        ax.set_title(metric)
        ax.set_xlabel("step")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


@tabular.command()
@click.option("--data", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="CSV of records (default: the shared Adult data).")
@click.option("--domain", "domain_path", type=click.Path(exists=True, dir_okay=False,
              path_type=Path), help="Domain file (schemas/domain.v1.json; default: Adult's).")
@click.option("--order", type=click.Choice(["file", "randomized", "ordered"]), default="file",
              show_default=True, help="Stream order of the rows.")
@declared_options("epsilon", "release_every", "neighbours", "tabular_mechanism",
                  "tabular_counter", "tabular_workloads_per_step", "selection", "estimator",
                  "fit", engine="tabular")
@time_options
@click.option("--max-steps", type=int, default=None, help="Stop after this many steps.")
@click.option("--write-every", type=int, default=50, show_default=True,
              help="Write the release file of every N-th step (the last is always written).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("dpsynth-tabular-out"), show_default=True)
@click.option("--report/--no-report", default=True, show_default=True,
              help="Write errors.csv and errors.png (workload errors against the true data: "
                   "evaluation, not private); --no-report writes only the private outputs.")
@fail_on_dpsynth_error
def run(data: Path | None, domain_path: Path | None, order: str, epsilon: float,
        release_every: int, neighbours: str, tabular_mechanism: str, tabular_counter: str,
        tabular_workloads_per_step: int | None, selection: str, estimator: str, fit: str,
        time_column: str | None,
        time_origin: str | None, time_period: float | None, time_end: str | None,
        max_steps: int | None, write_every: int, out: Path, report: bool) -> None:
    """Stream a table through the synthesizer; write releases, errors and a plot.

    Steps: under add/remove (the default) one per declared time step of --time-column (the
    count is private, so a step may not end after a number of rows, docs/privacy.md P11);
    under replacement one per --release-every rows, or per time step.
    """
    from dpsynth.cli.common import print_key, resolve_key
    from dpsynth.release import write_release_file

    console = Console()
    grid = time_steps(time_column, time_origin, time_period, time_end, neighbours,
                      library="TabularSynthesizer")
    records: list[dict[str, Any]] = []  # read with --data (a time column needs them)
    if data is None:
        if grid is not None:
            raise click.UsageError("--time-column needs --data: the Adult data has no time")
        if not (adult_dir() / "adult.csv").exists():
            raise click.UsageError(
                f"no --data given and {adult_dir()} is absent; pass --data and --domain, or "
                f"set {DATA_DIR_ENV} to the folder holding adult_liu_iterative_dp/")
        domain, codes, csv_order = load_adult()
    else:
        if domain_path is None:
            raise click.UsageError("--data needs --domain (schemas/domain.v1.json format)")
        domain = Domain.from_json_file(domain_path)
        records = _read_csv(data)
        if grid is not None and records and grid.column not in records[0]:
            raise click.UsageError(f"--time-column {grid.column!r} is not a column of {data}")
        codes = _encode(records, domain) if grid is None else np.zeros((0, len(domain.sizes)))
        csv_order = list(domain.attributes)
    if order != "file":
        if grid is not None:
            raise click.UsageError("--order reorders rows into batches; with --time-column the "
                                   "steps come from the time column: drop --order")
        codes = make_stream(codes, csv_order, domain, order, seed=0)
    batches = ([codes[i:i + release_every] for i in range(0, codes.shape[0], release_every)]
               if grid is None else _timed_batches(records, domain, grid))
    noise_key = resolve_key()
    print_key(console, noise_key)
    key = noise_key.reveal()
    synth = TabularSynthesizer(domain, epsilon, key, release_every=release_every,
                               mechanism=tabular_mechanism, counter=tabular_counter,
                               workloads_per_step=tabular_workloads_per_step,
                               selection=selection, estimator=estimator, fit=fit,
                               neighbours=neighbours)
    out.mkdir(parents=True, exist_ok=True)
    steps = len(batches) if max_steps is None else min(len(batches), max_steps)
    w = synth.workloads
    true_flat = np.zeros(int(w.offsets[-1]))
    rows: list[dict[str, Any]] = []
    release = None
    fed = 0
    with Progress(console=console) as progress:
        task = progress.add_task("steps", total=steps)
        # one batch = one public step (a time step, or paper 003's rows): privacy P11
        for chunk, (release,) in feed(synth, ((b, None) for b in batches[:steps]), steps=True):
            fed += chunk.shape[0]
            if report:
                true_flat += w.answers_flat(w.flat_index(chunk))
                metrics = step_metrics(w, w.split(true_flat), w.answers(release.records))
                rows.append({"step": release.step, "records": fed, **metrics})
            if release.step % write_every == 0 or release.step == steps:
                write_release_file(out / f"release-{release.step:06d}.tabular",
                                   encode_tabular_release(release,
                                                          run_id=f"run-{noise_key.fingerprint}",
                                                          partition=0))
            progress.advance(task)
    if release is not None:
        with open(out / "synthetic-last.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(domain.attributes))
            writer.writeheader()
            writer.writerows(domain.decode(release.records))
        (out / "release-metadata.json").write_text(json.dumps(release.metadata, indent=1))
    if not report or not rows:
        console.print(f"wrote {out}/synthetic-last.csv, release files ({steps} steps)")
        return
    with open(out / "errors.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["step", "records", *METRICS, *L1_METRICS])
        writer.writeheader()
        writer.writerows(rows)
    _plot(rows, out / "errors.png",
          f"{tabular_mechanism} ({tabular_counter}), ε={epsilon:g}, B={release_every}")
    last = rows[-10:]
    console.print(" ".join(f"{m}={np.mean([r[m] for r in last]):.4f}" for m in METRICS)
                  + f" (mean of the last {len(last)} steps; evaluation uses the true data)")
    console.print(f"wrote {out}/errors.csv, errors.png, synthetic-last.csv, release files")
