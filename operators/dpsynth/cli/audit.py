"""``dpsynth audit``: the neighbour audit of every public entry point (issue 13, P14).

Layer: adapter. The audit itself is :mod:`dpsynth.audit`; this module adds the commands as
entry points — ``dpsynth run`` (replacement, and add/remove with a declared time column; per
record, and per user: ``--privacy-unit user`` with a user column), ``dpsynth offline`` (pmm,
psmm, lowdim) and ``dpsynth tabular run`` — run in-process through the same click command code
a user runs (:class:`click.testing.CliRunner`, the key in ``DPSYNTH_NOISE_KEY``), each in a
fresh directory, with ``--no-report`` (summary.json, errors.csv and the plots are evaluation
artefacts of the raw input, declared not private, so they are neither audited nor written).
Every file the command publishes is read back: release files record by record, the synthetic
CSV (its rows), ``*.meta.json`` and ``release-metadata.json`` field by field, and the exit code.

.. code-block:: console

    $ dpsynth audit                      # library and command entry points, 100 keys each
    $ dpsynth audit 'library:adaptive:*' --keys 1000
    $ dpsynth audit 'worker:*' --worker-keys 20     # a real broker (KAFKA_BOOTSTRAP_SERVERS,
                                                    # else one is started)
"""

from __future__ import annotations

import csv
import fnmatch
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import click
import numpy as np
from click.testing import CliRunner

from dpsynth.audit.entries import (
    AUDIT_EPSILON,
    AUDIT_MAX_DEPTH,
    NOTIONS,
    EntryPoint,
    Output,
    library_entries,
    offline_statistics,
    table_domain,
)
from dpsynth.audit.fields import Fields, flatten, flatten_records
from dpsynth.audit.inputs import PER_STEP, AuditInput, point_input, table_input
from dpsynth.audit.measures import release_statistics, table_statistics
from dpsynth.audit.runner import audit_entry, audit_keys, false_alarm_note, markdown_table
from dpsynth.audit.stats import ALPHA
from dpsynth.audit.users import AUDIT_K, user_entries, user_input, user_neighbours
from dpsynth.keybinding import STATE_DIR_ENV
from dpsynth.keys import KEY_ENV, KEY_FILE_ENV
from dpsynth.release import decode_tabular_release, read_release_file, read_release_records

#: The user id column of the CSV of an input with users (``--user-column``).
USER_COLUMN = "user"
#: What ``dpsynth audit`` runs without patterns: the library and the commands (the worker needs
#: a broker; docs/privacy.md P14 states these and their count, tests/unit/test_audit_docs.py
#: checks it).
DEFAULT_PATTERNS = ("library:*", "cli:*")


def _invoke(command: click.Command, args: Sequence[str], key: bytes) -> int:
    """Run a command as a user would, with ``key`` as the run's key; its exit code.

    Each run binds its key in a fresh state directory: the audit runs one key over
    neighbouring inputs on purpose, which the binding (P13) refuses across runs.
    """
    with tempfile.TemporaryDirectory(prefix="dpsynth-audit-state-") as state:
        env = {KEY_ENV: key.hex(), KEY_FILE_ENV: None, STATE_DIR_ENV: state}
        return CliRunner().invoke(command, list(args), env=env).exit_code


def write_points(path: Path, data: AuditInput) -> tuple[Path, Path]:
    """The input as CSV (coordinates x0.., time column ``ts`` = step index, and with users
    the user column ``user``: :data:`USER_COLUMN`) and its schema (the coordinates)."""
    names = [f"x{i}" for i in range(data.width)]
    users = data.users if data.users is not None else [None] * len(data.steps)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*names, "ts", *([USER_COLUMN] if data.users is not None else [])])
        for s, (step, ids) in enumerate(zip(data.steps, users, strict=True)):
            writer.writerows([*map(repr, row.tolist()), s, *([] if ids is None else [ids[i]])]
                             for i, row in enumerate(step))
    schema = path.with_suffix(".schema.json")
    schema.write_text(json.dumps({"version": 1, "columns": [
        {"name": n, "lower": 0.0, "upper": 1.0} for n in names]}))
    return path, schema


def _time_options(data: AuditInput) -> list[str]:
    """One declared time step per public step (P11)."""
    return ["--time-column", "ts", "--time-origin", "0", "--time-period", "1",
            "--time-end", str(len(data.steps))]


def _published(out: Path, fields: Fields, exclude: tuple[str, ...] = ()) -> list[Path]:
    """The files under ``out`` (their names are a field), minus declared non-private ones."""
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name not in exclude)
    fields["files"] = tuple(str(p.relative_to(out)) for p in files)
    return files


def run_entry(command: click.Command, notion: str, unit: str = "record",
              epsilon: float = AUDIT_EPSILON) -> EntryPoint:
    """``dpsynth run --epsilon EPSILON`` on the input as a CSV: a release every step's records
    (replacement), or one per declared time step (add/remove).

    ``unit="user"`` (P15): D with users and the user-level neighbours of
    :mod:`dpsynth.audit.users`, each record's user in the CSV's user column, run with
    ``--privacy-unit user --user-column user --max-contributions K`` (K =
    :data:`~dpsynth.audit.users.AUDIT_K`) at user-level ε: the options a user passes, read
    through the command's own file path.
    """
    users = (["--privacy-unit", "user", "--user-column", USER_COLUMN, "--max-contributions",
              str(AUDIT_K)] if unit == "user" else [])

    def run(data: AuditInput, key: bytes) -> Output:
        with tempfile.TemporaryDirectory(prefix="dpsynth-audit-") as tmp:
            path, schema = write_points(Path(tmp) / "input.csv", data)
            out = Path(tmp) / "out"
            steps = (["--neighbours", "add_remove", *_time_options(data)]
                     if notion == "add_remove" else ["--release-every", str(PER_STEP)])
            fields: Fields = {"exit_code": _invoke(command, [
                "--input", str(path), "--schema", str(schema), "--epsilon", str(epsilon),
                "--max-depth", str(AUDIT_MAX_DEPTH), "--out", str(out), "--no-report",
                *steps, *users], key)}
            files = _published(out, fields, exclude=("dead-letter.ndjson",))
            releases = [p for p in files if p.suffix == ".bin"]
            fields["releases"] = len(releases)
            for i, p in enumerate(releases):
                flatten_records(read_release_records(p), f"release[{i}]", fields)
            return Output(fields, [read_release_file(p) for p in releases])

    if unit == "user":
        return EntryPoint(f"cli:run:{notion}:user", notion, user_input, run,
                          release_statistics, epsilon,
                          pairs=lambda data: user_neighbours(data, notion))
    return EntryPoint(f"cli:run:{notion}", notion, point_input, run, release_statistics,
                      epsilon)


def offline_entry(command: click.Command, method: str, notion: str) -> EntryPoint:
    """``dpsynth offline --mechanism METHOD`` on the input as a CSV (lowdim: d = 3, d′ = 2)."""
    d = 3 if method == "lowdim" else 2

    def run(data: AuditInput, key: bytes) -> Output:
        with tempfile.TemporaryDirectory(prefix="dpsynth-audit-") as tmp:
            path, schema = write_points(Path(tmp) / "input.csv", data)
            out = Path(tmp) / "out" / "synthetic.csv"
            extra = ["--target-dim", "2"] if method == "lowdim" else []
            fields: Fields = {"exit_code": _invoke(command, [
                "--input", str(path), "--schema", str(schema), "--mechanism", method,
                "--epsilon", str(AUDIT_EPSILON), "--neighbours", notion, "--max-depth",
                str(AUDIT_MAX_DEPTH), "--out", str(out), *extra], key)}
            _published(out.parent, fields)
            points = np.zeros((0, d))
            if out.exists():
                with open(out, newline="") as f:
                    rows = list(csv.reader(f))
                fields["csv.header"] = tuple(rows[0]) if rows else ()
                fields["csv.rows"] = max(len(rows) - 1, 0)
                points = np.array(rows[1:], np.float64).reshape(-1, d)
            meta = out.with_name(out.name + ".meta.json")
            if meta.exists():
                flatten(json.loads(meta.read_text()), "meta", fields)
            release = out.with_name(out.name + ".release.bin")
            if release.exists():
                flatten_records(read_release_records(release), "release", fields)
            return Output(fields, ("points", points))

    return EntryPoint(f"cli:offline:{method}:{notion}", notion, lambda: point_input(d), run,
                      offline_statistics)


def tabular_entry(command: click.Command, notion: str) -> EntryPoint:
    """``dpsynth tabular run`` on the input as a CSV with a domain file: a step per declared
    time step (add/remove) or per step's rows (replacement)."""

    def run(data: AuditInput, key: bytes) -> Output:
        with tempfile.TemporaryDirectory(prefix="dpsynth-audit-") as tmp:
            domain = Path(tmp) / "domain.json"
            domain.write_text(json.dumps(table_domain().to_dict()))
            path = Path(tmp) / "input.csv"
            with open(path, "w", newline="") as f:
                writer = csv.writer(f)
                writer.writerow([*table_domain().attributes, "ts"])
                for s, step in enumerate(data.steps):
                    writer.writerows([*row.tolist(), s] for row in step)
            out = Path(tmp) / "out"
            steps = (_time_options(data) if notion == "add_remove" else
                     ["--release-every", str(PER_STEP)])
            fields: Fields = {"exit_code": _invoke(command, [
                "run", "--data", str(path), "--domain", str(domain), "--epsilon",
                str(AUDIT_EPSILON), "--neighbours", notion, "--write-every", "1",
                "--out", str(out), "--no-report", *steps], key)}
            files = _published(out, fields)
            tables = []
            for i, p in enumerate(p for p in files if p.suffix == ".tabular"):
                records = read_release_records(p)
                flatten_records(records, f"release[{i}]", fields)
                tables.append(np.asarray(decode_tabular_release(records).records))
            fields["releases"] = len(tables)
            last = out / "synthetic-last.csv"
            if last.exists():
                fields["synthetic-last.rows"] = max(len(last.read_text().splitlines()) - 1, 0)
            meta = out / "release-metadata.json"
            if meta.exists():
                flatten(json.loads(meta.read_text()), "release-metadata", fields)
            return Output(fields, tables)

    return EntryPoint(f"cli:tabular:{notion}", notion, table_input, run, table_statistics)


def command_entries() -> list[EntryPoint]:
    """The commands as entry points (their command objects, as ``dpsynth`` registers them)."""
    from dpsynth.cli.offline import offline as offline_command
    from dpsynth.cli.run import run as run_command
    from dpsynth.cli.tabular import tabular as tabular_group

    entries = [run_entry(run_command, n) for n in NOTIONS]
    entries += [offline_entry(offline_command, m, n) for m in ("pmm", "psmm") for n in NOTIONS]
    entries += [offline_entry(offline_command, "lowdim", "replace")]
    entries += [tabular_entry(tabular_group, n) for n in NOTIONS]
    return entries


def user_command_entries() -> list[EntryPoint]:
    """``dpsynth run`` under the privacy unit "user" (P15), both notions."""
    from dpsynth.cli.run import run as run_command

    return [run_entry(run_command, n, unit="user") for n in NOTIONS]


def all_entries(broker: str | None = None) -> list[EntryPoint]:
    """Every entry point: the library (record and user level), the commands and the worker
    (record and user level; a broker when run)."""
    from dpsynth.audit.worker import worker_entry

    def bootstrap() -> str:
        if broker:
            return broker
        from dpsynth.testing.broker import bootstrap_servers

        return bootstrap_servers()

    return [*library_entries(), *user_entries(), *command_entries(), *user_command_entries(),
            *(worker_entry(n, bootstrap, engine=e) for e in ("points", "tabular")
              for n in NOTIONS),
            *(worker_entry(n, bootstrap, unit="user") for n in NOTIONS)]


def selected(entries: list[EntryPoint], patterns: Sequence[str]) -> list[EntryPoint]:
    """The entries whose names match any of ``patterns`` (shell patterns); none: a usage
    error."""
    chosen = [e for e in entries if any(fnmatch.fnmatchcase(e.name, p) for p in patterns)]
    if not chosen:
        raise click.UsageError(f"no entry point matches {list(patterns)}; see --list")
    return chosen


@click.command()
@click.argument("patterns", nargs=-1)
@click.option("--keys", type=click.IntRange(min=4), default=100, show_default=True,
              help="Keys per library or command entry point (half choose each test's "
                   "threshold, half judge it).")
@click.option("--worker-keys", type=click.IntRange(min=4), default=20, show_default=True,
              help="(key, partition) samples per worker entry point (4 partitions per run).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Which public audit keys: key i = SHA-256('dpsynth-audit', seed, i).")
@click.option("--alpha", type=click.FloatRange(1e-9, 0.5), default=ALPHA, show_default=True,
              help="Error rate of each entry point's ε lower bounds (together).")
@click.option("--broker", help="Kafka bootstrap servers for the worker entry points (default: "
                               "$KAFKA_BOOTSTRAP_SERVERS, else a local broker is started).")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the table of results (Markdown) to this file.")
@click.option("--list", "list_only", is_flag=True, help="List the entry points and exit.")
def audit(patterns: tuple[str, ...], keys: int, worker_keys: int, seed: int, alpha: float,
          broker: str | None, markdown: Path | None, list_only: bool) -> None:
    """Run entry points on neighbouring inputs under many keys; fail on any leak.

    PATTERNS select entry points by name (shell patterns, e.g. 'library:*', 'cli:run:*',
    'worker:*'; default: every library and command entry point). For each, the same keys
    run D and every neighbour D′ (an outlier added early or late, the first record removed;
    or replaced). It fails on (a) any published field that is constant across the keys on D
    and on D′ but differs between them, and (b) an empirical ε lower bound above the
    configured ε (threshold tests on release statistics, Clopper–Pearson intervals,
    thresholds chosen on half the keys and judged on the other half). Exit status 1 on a
    failure. docs/privacy.md P14 states its power.
    """
    entries = all_entries(broker)
    if list_only:
        for entry in entries:
            click.echo(entry.name)
        return
    chosen = selected(entries, patterns or DEFAULT_PATTERNS)
    reports = []
    for entry in chosen:
        count = worker_keys if entry.name.startswith("worker:") else keys
        report = audit_entry(entry, audit_keys(count, seed), alpha=alpha)
        reports.append(report)
        click.echo("\n".join(report.lines()))
    table = markdown_table(reports)
    click.echo("\n" + table)
    click.echo(false_alarm_note(AUDIT_EPSILON, min(r.keys for r in reports), alpha))
    if markdown is not None:
        markdown.write_text(table + "\n")
    failed = [r.entry for r in reports if not r.passed]
    if failed:
        click.echo(f"FAILED: {', '.join(failed)}", err=True)
        sys.exit(1)

