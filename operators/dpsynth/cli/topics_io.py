"""``dpsynth topics export`` and ``dpsynth topics import``: topics to recordings and back.

Layer: adapter (click, rich). The work is :mod:`dpsynth.client.transfer`; the file format is
:mod:`dpsynth.client.recording` (``schemas/recording.v1.json``). A recording of the raw-events or
the dead-letter topic holds the sensitive input: the command says so, and nothing here prints a
record.

.. code-block:: console

    $ dpsynth topics export --topic dpsynth-synthetic --out synthetic.ndjson.gz
    $ dpsynth topics import synthetic.ndjson.gz --bootstrap 127.0.0.1:9093 --topic replayed
    $ dpsynth topics import raw.ndjson.gz --pace --speed 10 --timestamps shift
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from dpsynth.cli.errors import fail_on_dpsynth_error
from dpsynth.cli.kafka import bootstrap_option, resolve_bootstrap
from dpsynth.client.recording import ROLES
from dpsynth.client.topic_admin import retention_ms, topic_partitions
from dpsynth.client.transfer import (
    TIMESTAMP_MODES,
    TransferSummary,
    export_topic,
    import_recording,
)
from dpsynth.schema import Schema

_SENSITIVE = ("[yellow]{what} holds records of role {role}, not releases: they may be sensitive "
              "input; keep them where the raw-events topic may be kept, never publish them[/]")


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise click.BadParameter(f"{text!r} must be KEY=VALUE", param_hint="--config")
    return key.strip(), value.strip()


def _progress(console: Console, label: str) -> Progress:
    return Progress(SpinnerColumn(), TextColumn(f"{label} {{task.completed:,}} records"),
                    TimeElapsedColumn(), console=console, transient=True)


def _done(verb: str, summary: TransferSummary, where: str) -> str:
    rate = summary.records / summary.seconds if summary.seconds > 0 else float("inf")
    parts = len(summary.per_partition)
    return (f"{verb} {summary.records:,} records ({parts} partition{'s' if parts != 1 else ''}"
            f" with records) {where} in {summary.seconds:.2f} s: {rate:,.0f} records/s")


@click.command(name="export")
@bootstrap_option
@click.option("--topic", required=True, help="The topic to record (synthetic, raw-events, "
                                             "dead-letter or any other).")
@click.option("--out", "out", type=click.Path(dir_okay=False, allow_dash=True),
              help="The recording: gzip NDJSON (a name ending in .ndjson is written "
                   "uncompressed; '-' is standard output). Default: TOPIC.ndjson.gz.")
@click.option("--role", type=click.Choice(["auto", *ROLES]), default="auto", show_default=True,
              help="What the topic holds, for the header (auto: told by its records).")
@click.option("--run-id", help="The run to name in the header (default: the one the records "
                               "name: a release's run id, a tick marker's).")
@click.option("--schema", "schema_path",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The record schema of the run (schemas/), copied into the header so readers "
                   "map synthetic points back to its units.")
@click.option("--note", help="Free text for the header (where and why it was recorded).")
@click.option("--timeout", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds without a new record before the export fails.")
@fail_on_dpsynth_error
def export(bootstrap: str | None, topic: str, out: str | None, role: str, run_id: str | None,
           schema_path: Path | None, note: str | None, timeout: float) -> None:
    """Record every record of a topic (to its end now) into a file: partition, offset, key,
    value, headers and timestamp, partitions merged by timestamp (schemas/recording.v1.json)."""
    console = Console(stderr=True)
    servers = resolve_bootstrap(bootstrap)
    target = out or f"{topic}.ndjson.gz"
    schema = Schema.from_json_file(schema_path).to_dict() if schema_path is not None else None
    with _progress(console, f"{topic} →") as progress:
        task = progress.add_task("export")
        summary = export_topic(servers, topic, target, role=role, run_id=run_id,
                               record_schema=schema, note=note, timeout_s=timeout,
                               progress=lambda n: progress.update(task, completed=n))
    header = summary.header
    where = "standard output" if target == "-" else target
    console.print(f"topic {topic}: role {header.role}, run {header.run_id or '(none named)'}"
                  + (f", ε = {header.release['epsilon']:g}"
                     if header.release and "epsilon" in header.release else ""),
                  soft_wrap=True)
    if header.sensitive:
        console.print(_SENSITIVE.format(what=where, role=header.role), soft_wrap=True)
    console.print(_done("exported", summary, f"to {where}"), highlight=False, soft_wrap=True)


@click.command(name="import")
@click.argument("recording", type=click.Path(dir_okay=False, allow_dash=True))
@bootstrap_option
@click.option("--topic", help="The topic to write (default: the recorded topic's name).")
@click.option("--timestamps", type=click.Choice(TIMESTAMP_MODES), default="recorded",
              show_default=True,
              help="recorded: each record's recorded timestamp (as CreateTime); now: stamped "
                   "when sent; shift: the recorded times moved so that the first is now.")
@click.option("--pace", is_flag=True,
              help="Send at the recorded rate (the gaps between recorded timestamps).")
@click.option("--speed", type=click.FloatRange(min=0, min_open=True), metavar="X",
              help="With --pace: X times the recorded rate (implies --pace).")
@click.option("--no-create", is_flag=True,
              help="Fail if the topic is missing (default: create it with the recording's "
                   "partition count).")
@click.option("--replication-factor", "replication", type=int, default=-1, show_default=True,
              help="Replication factor of a topic created here (-1: the broker's default).")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="Topic setting of a topic created here, e.g. retention.ms=-1 (repeatable).")
@fail_on_dpsynth_error
def import_(recording: str, bootstrap: str | None, topic: str | None, timestamps: str,
            pace: bool, speed: float | None, no_create: bool, replication: int,
            configs: tuple[str, ...]) -> None:
    """Write a recording into a topic: each record to its recorded partition, in order, with
    its key, value, headers and timestamp. A topic with fewer partitions than the recording's
    is refused."""
    console = Console(stderr=True)
    servers = resolve_bootstrap(bootstrap)
    if recording != "-" and not os.path.isfile(recording):
        raise click.BadParameter(f"{recording!r} is not a file", param_hint="RECORDING")
    pace_speed = speed if speed is not None else (1.0 if pace else None)
    topic_config = dict(_setting(c) for c in configs)
    with _progress(console, "→ topic") as progress:
        task = progress.add_task("import")
        summary = import_recording(servers, recording, topic=topic, timestamps=timestamps,
                                   speed=pace_speed, create=not no_create,
                                   replication_factor=replication, topic_config=topic_config,
                                   progress=lambda n: progress.update(task, completed=n))
    header = summary.header
    if header.sensitive:
        console.print(_SENSITIVE.format(what=f"topic {summary.topic}", role=header.role),
                      soft_wrap=True)
    partitions = topic_partitions(servers, summary.topic)
    retention = retention_ms(servers, summary.topic)
    if (summary.oldest_ms is not None and retention is not None and retention >= 0
            and time.time() * 1000 - summary.oldest_ms > retention):
        console.print(f"[yellow]records older than the topic's retention (retention.ms="
                      f"{retention}) were written: the broker will delete them at its next "
                      "retention check. Re-import with --timestamps shift, or into a topic "
                      "created with --config retention.ms=-1[/]", soft_wrap=True)
    where = f"into {summary.topic} ({partitions} partitions, timestamps {timestamps})"
    console.print(_done("imported", summary, where), highlight=False, soft_wrap=True)
