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
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import numpy as np
from rich.console import Console
from rich.progress import Progress

from dpsynth.cli.errors import EXIT_STATUS_HELP, InputError, fail_on_dpsynth_error
from dpsynth.cli.options import declared_options
from dpsynth.cli.outputs import Diagnostics, prepare_out_dir
from dpsynth.cli.timesteps import TimeSteps, time_options, time_steps
from dpsynth.contract import feed
from dpsynth.datasets import DATA_DIR_ENV, adult_dir, load_adult, make_stream
from dpsynth.errors import ConfigError
from dpsynth.release import encode_tabular_release
from dpsynth.tabular.config import TabularConfig
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.metrics import L1_METRICS, METRICS, step_metrics
from dpsynth.tabular.synthesizer import TabularSynthesizer

if TYPE_CHECKING:
    from dpsynth.cli.common import ReadFile

#: What ``tabular run`` writes under ``--out`` (a reused directory is emptied of these first).
TABULAR_OUTPUTS = ("release-*.tabular", "synthetic-last.csv", "release-metadata.json",
                   "errors.csv", "errors.png")
#: Options that do not shape the releases (or name the input, bound as the input instead).
NOT_SETTINGS = ("data", "out", "report", "write_every")
#: The workload errors ``tabular run`` prints (paper 003 §7.3; docs/tabular.md T12).
METRIC_LEGEND = ("AvgWE/MaxWE: mean/largest over the 2-way workloads of the mean absolute "
                 "error of the normalised answers; AvgRelWE/MaxRelWE: the same for the error "
                 "relative to the true answer, over the cells the true table holds")


@click.group()
def tabular() -> None:
    """Synthetic tables over a finite domain (paper 003: select–measure–fit, Alg 3)."""


def _read_csv(file: ReadFile) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """The rows of a CSV file read once (P13), with a header (an unnamed first column is
    ignored), and the header's names; bytes that cannot be decoded are an input error (exit
    status 1)."""
    try:
        reader = csv.DictReader(io.StringIO(file.data.decode("utf-8"), newline=""))
        return list(reader), tuple(name for name in (reader.fieldnames or ()) if name)
    except (UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"{file.path} cannot be read as CSV ({type(e).__name__}: {e}); give "
                         "a UTF-8 CSV file with a header") from None


def _check_header(path: Path, header: tuple[str, ...], domain: Domain,
                  time_column: str | None) -> None:
    """Every attribute of the domain (and the time column) is a column of the header."""
    needed = [*domain.attributes, *([time_column] if time_column else [])]
    missing = [name for name in needed if name not in header]
    if missing:
        raise InputError(f"{path}: the CSV header ({', '.join(header) or 'empty'}) has no "
                         f"column {', '.join(map(repr, missing))} named by the domain"
                         f"{' or --time-column' if time_column in missing else ''}; fix the "
                         "domain's attribute names or the header")


def _encode(records: list[dict[str, Any]], domain: Domain,
            diagnostics: Diagnostics) -> np.ndarray:
    """Codes of the valid records, in order; the invalid ones are counted by reason."""
    codes, reasons = domain.encode(records)
    diagnostics.reject(r for r in reasons if r is not None)
    return codes


def _timed_batches(records: list[dict[str, Any]], domain: Domain,
                   steps: TimeSteps, diagnostics: Diagnostics) -> list[np.ndarray]:
    """One batch per declared time step (public time, P11): its valid records in file order."""
    bucket, rejects = steps.buckets(records)
    timed = [i for i in range(len(records)) if bucket[i] >= 0]
    codes, reasons = domain.encode([records[i] for i in timed])
    valid = np.array([timed[j] for j, r in enumerate(reasons) if r is None], np.int64)
    diagnostics.reject([r for _, r in rejects] + [r for r in reasons if r is not None])
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


@tabular.command(epilog=EXIT_STATUS_HELP)
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
              default=Path("dpsynth-tabular-out"), show_default=True,
              help="Output directory (new, or an earlier run's, whose outputs are replaced).")
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
    under replacement one per --release-every rows, or per time step. Standard output says
    only what the releases make public; counts, rejections and workload errors (evaluation
    against the true data) go to standard error.
    """
    from dpsynth.cli.common import bind_key_to_input, print_key, resolve_key, stderr_console

    params = click.get_current_context().params
    console, err = Console(highlight=False, soft_wrap=True), stderr_console()
    grid = time_steps(time_column, time_origin, time_period, time_end, neighbours,
                      library="TabularSynthesizer")
    table = _load(data, domain_path, order, grid, release_every)
    noise_key = resolve_key()
    try:  # a combination of options the library refuses is a usage error
        config = TabularConfig.resolve(table.domain, epsilon, release_every,
                                       mechanism=tabular_mechanism, counter=tabular_counter,
                                       workloads_per_step=tabular_workloads_per_step,
                                       selection=selection, estimator=estimator, fit=fit,
                                       neighbours=neighbours)
        synth = TabularSynthesizer.from_config(config, noise_key.reveal())
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    bind_key_to_input(noise_key, f"dpsynth tabular run over {data or 'Adult'}", table.identity,
                      params, NOT_SETTINGS, table.setting_files)  # privacy: P13
    print_key(console, noise_key)
    steps = (len(table.batches) if max_steps is None
             else min(len(table.batches), max_steps))
    table.diagnostics.print(err)
    if neighbours == "replace" and (steps == 0 or not table.diagnostics.accepted):  # public
        raise InputError(f"no release: {table.diagnostics.accepted:,} valid rows make no step; "
                         "check the data against its domain (reasons above)" + (
                             "" if grid is not None else " or lower --release-every"))
    prepare_out_dir(out, TABULAR_OUTPUTS)
    rows = _stream(synth, table.batches[:steps], steps, out, write_every, report,
                   f"run-{noise_key.fingerprint}", err)
    if not report or not rows:
        console.print(f"wrote {out}/synthetic-last.csv, release files ({steps} steps)")
        return
    _report(rows, out, f"{tabular_mechanism} ({tabular_counter}), ε={epsilon:g}, "
                       f"B={release_every}", err)
    console.print(f"wrote {out}/errors.csv, errors.png (evaluation: not private), "
                  f"synthetic-last.csv, release files ({steps} steps)")


@dataclass
class _Table:
    """The input of ``tabular run``: its domain, the batches of codes (one per public step),
    what the key is bound to, and the operator diagnostics."""

    domain: Domain
    batches: list[np.ndarray]
    identity: dict[str, Any]
    setting_files: dict[str, str]
    diagnostics: Diagnostics


def _load(data: Path | None, domain_path: Path | None, order: str, grid: TimeSteps | None,
          release_every: int) -> _Table:
    """Read the domain and the rows once (P13; the Adult data without ``--data``), encode them
    and cut them into steps: declared time steps, or batches of ``--release-every`` rows."""
    from dpsynth.cli.common import file_digest, read_json, read_once

    records: list[dict[str, Any]] = []  # read with --data (a time column needs them)
    diagnostics = Diagnostics()
    # read once, bound by the bytes read (P13); the Adult data ignores it, but it stays bound
    domain_file = None if domain_path is None else read_once(domain_path)
    if data is None:
        if grid is not None:
            raise click.UsageError("--time-column needs --data: the Adult data has no time")
        if not (adult_dir() / "adult.csv").exists():
            raise InputError(
                f"no --data given and {adult_dir()} is absent; pass --data and --domain, or "
                f"set {DATA_DIR_ENV} to the folder holding adult_liu_iterative_dp/")
        domain, codes, csv_order = load_adult()
        identity: dict[str, Any] = {"dataset": "adult",
                                    "file": file_digest(adult_dir() / "adult.csv")}
        diagnostics.read = diagnostics.accepted = int(codes.shape[0])
    else:
        if domain_file is None:
            raise click.UsageError("--data needs --domain (schemas/domain.v1.json format)")
        domain = Domain.from_dict(read_json(domain_file, "domain"))
        data_file = read_once(data)
        records, header = _read_csv(data_file)
        _check_header(data, header, domain, None if grid is None else grid.column)
        identity = {"file": data_file.digest}
        diagnostics.read = len(records)
        codes = (_encode(records, domain, diagnostics) if grid is None
                 else np.zeros((0, len(domain.sizes))))
        csv_order = list(domain.attributes)
    if order != "file":
        if grid is not None:
            raise click.UsageError("--order reorders rows into batches; with --time-column the "
                                   "steps come from the time column: drop --order")
        codes = make_stream(codes, csv_order, domain, order, seed=0)
    batches = ([codes[i:i + release_every] for i in range(0, codes.shape[0], release_every)]
               if grid is None else _timed_batches(records, domain, grid, diagnostics))
    if grid is not None:
        diagnostics.accepted = sum(int(b.shape[0]) for b in batches)
    elif data is not None:
        diagnostics.accepted = int(codes.shape[0])
    files = {} if domain_file is None else {"domain_path": domain_file.digest}
    return _Table(domain, batches, identity, files, diagnostics)


def _stream(synth: TabularSynthesizer, batches: list[np.ndarray], steps: int, out: Path,
            write_every: int, report: bool, run_id: str, err: Console) -> list[dict[str, Any]]:
    """Feed one batch per public step; write every ``write_every``-th release (and the last),
    the last synthetic table and its metadata; the per-step workload errors with ``report``."""
    from dpsynth.release import write_release_file

    w = synth.workloads
    true_flat = np.zeros(int(w.offsets[-1]))
    rows: list[dict[str, Any]] = []
    release = None
    fed = 0
    with Progress(console=err) as progress:
        task = progress.add_task("steps", total=steps)
        # one batch = one public step (a time step, or paper 003's rows): privacy P11
        for chunk, (release,) in feed(synth, ((b, None) for b in batches), steps=True):
            fed += chunk.shape[0]
            if report:
                true_flat += w.answers_flat(w.flat_index(chunk))
                metrics = step_metrics(w, w.split(true_flat), w.answers(release.records))
                rows.append({"step": release.step, "records": fed, **metrics})
            if release.step % write_every == 0 or release.step == steps:
                write_release_file(out / f"release-{release.step:06d}.tabular",
                                   encode_tabular_release(release, run_id=run_id, partition=0))
            progress.advance(task)
    if release is not None:
        with open(out / "synthetic-last.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(synth.domain.attributes))
            writer.writeheader()
            writer.writerows(synth.domain.decode(release.records))
        (out / "release-metadata.json").write_text(json.dumps(release.metadata, indent=1))
    return rows


def _report(rows: list[dict[str, Any]], out: Path, title: str, err: Console) -> None:
    """errors.csv, errors.png and the mean of the last steps' errors (evaluation against the
    true data: not private)."""
    with open(out / "errors.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["step", "records", *METRICS, *L1_METRICS])
        writer.writeheader()
        writer.writerows(rows)
    _plot(rows, out / "errors.png", title)
    last = rows[-10:]
    err.print("evaluation (not private: against the true data), mean of the last "
              f"{len(last)} steps: "
              + " ".join(f"{m}={np.mean([r[m] for r in last]):.4f}" for m in METRICS)
              + f"\n  {METRIC_LEGEND}", highlight=False)
