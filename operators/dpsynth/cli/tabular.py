"""``dpsynth tabular``: run paper 003's select–measure–fit synthesizer on a table (issue 7).

Layer: adapter. ``dpsynth tabular run`` streams the Adult data (or any CSV + domain file)
through :class:`~dpsynth.tabular.TabularSynthesizer` in batches, writes releases in the
``tabular.v1`` format, the last synthetic table as CSV, per-step workload errors (evaluation
against the true data: not private, for the operator only) and a plot. The reproduction benchmark of
the paper's tables is ``python -m benchmarks tabular`` (outside the package).
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
from dpsynth.datasets import DATA_DIR_ENV, adult_dir, load_adult, make_stream
from dpsynth.release import encode_tabular_release
from dpsynth.tabular.counters import COUNTERS
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.metrics import L1_METRICS, METRICS, step_metrics
from dpsynth.tabular.synthesizer import FITS, METHODS, TabularSynthesizer


@click.group()
def tabular() -> None:
    """Synthetic tables over a finite domain (paper 003: select–measure–fit, Alg 3)."""


def _load_csv(path: Path, domain: Domain) -> np.ndarray:
    """Encode a CSV (header row names the attributes; an unnamed first column is ignored)."""
    with open(path, newline="", encoding="utf-8") as f:
        records = list(csv.DictReader(f))
    codes, reasons = domain.encode(records)
    bad = [r for r in reasons if r is not None]
    if bad:
        click.echo(f"skipped {len(bad)} invalid records (first reason: {bad[0]})", err=True)
    return codes


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
@click.option("--epsilon", type=float, default=1.0, show_default=True)
@click.option("--release-every", type=int, default=200, show_default=True,
              help="Records per batch; each batch is one public time step (the paper's "
                   "streams), ended by step(), never by counting records.")
@click.option("--neighbours", type=click.Choice(["add_remove", "replace"]),
              default="add_remove", show_default=True,
              help="add_remove: the paper's notion, the table size is a noisy count; "
                   "replace: the count is public, every sensitivity doubled.")
@click.option("--mechanism", type=click.Choice(METHODS), default="proposed", show_default=True,
              help="proposed: select-measure-fit (Alg 3); baseline: StreamingMWEM (Alg 2).")
@click.option("--counter", type=click.Choice(COUNTERS), default="simple", show_default=True)
@click.option("--k", "k", type=int, default=3, show_default=True,
              help="Workloads selected per step.")
@click.option("--selection", type=click.Choice(["cyclic", "em"]), default="cyclic",
              show_default=True, help="cyclic: a public schedule, no ε (docs/tabular.md T18); "
                                      "em: the exponential mechanism, as printed.")
@click.option("--estimator", type=click.Choice(["sample", "alg3"]), default="sample",
              show_default=True, help="sample: counter shares (T6); alg3: the paper's m and r.")
@click.option("--fit", type=click.Choice(FITS), default="mw", show_default=True,
              help="Model fit: multiplicative weights, or PGM (needs dpsynth[pgm] and "
                   "--estimator alg3).")
@click.option("--max-steps", type=int, default=None, help="Stop after this many steps.")
@click.option("--write-every", type=int, default=50, show_default=True,
              help="Write the release file of every N-th step (the last is always written).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("dpsynth-tabular-out"), show_default=True)
@fail_on_dpsynth_error
def run(data: Path | None, domain_path: Path | None, order: str, epsilon: float,
        release_every: int, neighbours: str, mechanism: str, counter: str, k: int,
        selection: str, estimator: str, fit: str, max_steps: int | None, write_every: int,
        out: Path) -> None:
    """Stream a table through the synthesizer; write releases, errors and a plot."""
    from dpsynth.cli.common import print_key, resolve_key
    from dpsynth.release import write_release_file

    console = Console()
    if data is None:
        if not (adult_dir() / "adult.csv").exists():
            raise click.UsageError(
                f"no --data given and {adult_dir()} is absent; pass --data and --domain, or "
                f"set {DATA_DIR_ENV} to the folder holding adult_liu_iterative_dp/")
        domain, codes, csv_order = load_adult()
    else:
        if domain_path is None:
            raise click.UsageError("--data needs --domain (schemas/domain.v1.json format)")
        domain = Domain.from_json_file(domain_path)
        codes, csv_order = _load_csv(data, domain), list(domain.attributes)
    if order != "file":
        codes = make_stream(codes, csv_order, domain, order, seed=0)
    noise_key = resolve_key()
    print_key(console, noise_key)
    key = noise_key.reveal()
    synth = TabularSynthesizer(domain, epsilon, key, release_every=release_every,
                               mechanism=mechanism, counter=counter, workloads_per_step=k,
                               selection=selection, estimator=estimator, fit=fit,
                               neighbours=neighbours)
    out.mkdir(parents=True, exist_ok=True)
    steps = -(-codes.shape[0] // release_every)
    if max_steps is not None:
        steps = min(steps, max_steps)
    w = synth.workloads
    true_flat = np.zeros(int(w.offsets[-1]))
    rows: list[dict[str, Any]] = []
    release = None
    with Progress(console=console) as progress:
        task = progress.add_task("steps", total=steps)
        for t in range(steps):
            chunk = codes[t * release_every:(t + 1) * release_every]
            synth.add(chunk)  # one batch = one public step (paper 003's streams)
            release = synth.step()
            true_flat += w.answers_flat(w.flat_index(chunk))
            metrics = step_metrics(w, w.split(true_flat), w.answers(release.records))
            rows.append({"step": release.step, "records": min((t + 1) * release_every,
                                                              codes.shape[0]), **metrics})
            if (t + 1) % write_every == 0 or t == steps - 1:
                write_release_file(out / f"release-{release.step:06d}.tabular",
                                   encode_tabular_release(release,
                                                          run_id=f"run-{noise_key.fingerprint}",
                                                          partition=0))
            progress.advance(task)
    with open(out / "errors.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["step", "records", *METRICS, *L1_METRICS])
        writer.writeheader()
        writer.writerows(rows)
    if release is not None:
        with open(out / "synthetic-last.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(domain.attributes))
            writer.writeheader()
            writer.writerows(domain.decode(release.records))
        (out / "release-metadata.json").write_text(json.dumps(release.metadata, indent=1))
    _plot(rows, out / "errors.png", f"{mechanism} ({counter}), ε={epsilon:g}, B={release_every}")
    last = rows[-10:]
    console.print(" ".join(f"{m}={np.mean([r[m] for r in last]):.4f}" for m in METRICS)
                  + f" (mean of the last {len(last)} steps; evaluation uses the true data)")
    console.print(f"wrote {out}/errors.csv, errors.png, synthetic-last.csv, release files")
