"""``dpsynth consume``: releases out of the synthetic topic, merged.

Layer: adapter. Reads the synthetic topic with the consumer library (:mod:`dpsynth.client`:
read_committed, releases reassembled and checked, duplicates dropped, incomplete or corrupt
releases rejected), prints one line per release and the size of the merged dataset (the union
of every partition's latest release); ``--out DIR`` writes the merged points as CSV.

.. code-block:: console

    $ dpsynth consume --from-beginning --timeout 30 --out merged/
"""

from __future__ import annotations

import csv
import json
import logging
import os
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.markup import escape

from dpsynth.cli.errors import fail_on_dpsynth_error
from dpsynth.cli.kafka import bootstrap_option, cluster_metadata, kafka_module, resolve_bootstrap
from dpsynth.schema import Schema

# -- consume -------------------------------------------------------------------------------------


class _Stop(Exception):
    """SIGTERM arrived: finish like Ctrl-C (summary, --out), then exit 0."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Stop


def write_points_csv(path: Path, points: np.ndarray, names: Sequence[str]) -> None:
    """Write points as CSV with a header (``names``), atomically (temporary name, rename)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(names)
        writer.writerows(points.tolist())
    os.replace(tmp, path)


def release_line(key: Any, release: Any) -> str:
    """The summary line of one release (public quantities only: a release is ε-DP)."""
    leaves = int(np.count_nonzero(release.leaf_counts))
    return (f"release partition {key.partition}  sequence {key.sequence}  t {release.t}  "
            f"depth {release.depth}  non-empty leaves {leaves}  (run {key.run_id})")


class _RejectEcho(logging.Handler):
    """Prints the consumer library's warnings (rejected releases, read errors) as they occur.

    The first :data:`ECHO_LIMIT` only: a wrong topic would otherwise print one line per record.
    """

    ECHO_LIMIT = 20

    def __init__(self, console: Console) -> None:
        super().__init__(logging.WARNING)
        self.console = console
        self.seen = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.seen += 1
        if self.seen <= self.ECHO_LIMIT:
            self.console.print(f"[yellow]{escape(record.getMessage())}[/]", highlight=False,
                               soft_wrap=True)
        elif self.seen == self.ECHO_LIMIT + 1:
            self.console.print("[yellow]… more rejections: counted, not printed (is --topic "
                               "the synthetic topic?)[/]", highlight=False)


@click.command()
@bootstrap_option
@click.option("--topic",
              default=lambda: os.environ.get("DPSYNTH_OUTPUT_TOPIC") or "dpsynth-synthetic",
              show_default="$DPSYNTH_OUTPUT_TOPIC, else dpsynth-synthetic",
              help="The synthetic topic.")
@click.option("--from-beginning", is_flag=True,
              help="Read the topic from its start (default: only releases published from now).")
@click.option("--latest-view", is_flag=True,
              help="Read the latest view of --topic (its compacted TOPIC-latest: each input "
                   "partition's newest release, about one release per partition) from its "
                   "start.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="S",
              help="Stop after S seconds without a new record (default: run until Ctrl-C or "
                   "SIGTERM).")
@click.option("--max-releases", type=click.IntRange(min=1), metavar="N",
              help="Stop after N releases.")
@click.option("--run-id", help="Only the releases of this run (DPSYNTH_RUN_ID of the worker).")
@click.option("--group", "group_id",
              help="Join this consumer group and commit its offsets (default: no group, every "
                   "partition read by this consumer alone).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Write DIR/merged.csv (the union of every partition's latest release) and "
                   "DIR/releases.json (which releases) at the end.")
@click.option("--schema", "schema_path",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Write the merged points in the original units and column names of this "
                   "schema (else in [0,1]^d, columns x0, x1, …).")
@fail_on_dpsynth_error
def consume(bootstrap: str | None, topic: str, from_beginning: bool, latest_view: bool,
            timeout: float | None, max_releases: int | None, run_id: str | None,
            group_id: str | None, out: Path | None, schema_path: Path | None) -> None:
    """Reassemble releases from the synthetic topic; print each once, then the merged size.

    Reads read_committed through the consumer library: complete, checksummed releases only,
    duplicates (retried releases) dropped, incomplete or corrupt releases rejected and reported.
    """
    kafka = kafka_module()
    from dpsynth.client.consumer import ReleaseConsumer, latest_view_topic

    if latest_view:
        topic, from_beginning = latest_view_topic(topic), True
    console = Console(stderr=True)
    servers = resolve_bootstrap(bootstrap)
    schema = Schema.from_json_file(schema_path) if schema_path is not None else None
    cluster_metadata(kafka.admin.AdminClient({"bootstrap.servers": servers}), servers)
    library_log = logging.getLogger("dpsynth.client.consumer")
    echo = _RejectEcho(console)
    library_log.addHandler(echo)
    previous = (signal.signal(signal.SIGTERM, _on_sigterm)
                if threading.current_thread() is threading.main_thread() else None)
    reported = 0
    try:
        try:
            consumer = ReleaseConsumer(servers, topic, group_id=group_id, run_id=run_id,
                                       from_beginning=from_beginning)
        except ValueError as e:
            raise click.ClickException(f"{e}; create it or fix --topic") from None
        with consumer:
            where = "from the beginning" if from_beginning else "from now on"
            stop = (f"stops after {timeout:g} s without a record" if timeout is not None
                    else "Ctrl-C to stop")
            console.print(f"reading {topic} at {servers} {where} ({stop})")
            try:
                for event in consumer.releases(idle_s=timeout):
                    click.echo(release_line(event.key, event.release))
                    reported += 1
                    if max_releases is not None and reported >= max_releases:
                        break
            except (KeyboardInterrupt, _Stop):
                console.print("stopping")
            _summary(consumer, reported, run_id, schema, out, console)
    finally:
        library_log.removeHandler(echo)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _summary(consumer: Any, reported: int, run_id: str | None, schema: Schema | None,
             out: Path | None, console: Console) -> None:
    """The closing lines: counts, incomplete releases, the merged dataset (and --out)."""
    tracker = consumer.tracker
    pending = tracker.assembler.pending
    for key in pending:
        console.print(f"[yellow]release {escape(str(tuple(key)))} incomplete at exit (no end "
                      "record): rejected[/]", highlight=False)
    click.echo(f"{reported} releases, {consumer.rejected + len(pending)} rejected "
               f"(incomplete or corrupt), {tracker.records} records read")
    runs = sorted({r for r, _ in consumer.latest})
    if run_id is None and len(runs) > 1:
        for run in runs:
            t = consumer.latest_t(run)
            click.echo(f"run {run}: {sum(t.values())} points over {len(t)} partitions")
        if out is not None:
            raise click.UsageError(f"the topic holds several runs {runs}: pass --run-id to "
                                   "choose the one written to --out")
        return
    latest = [(key, rel) for (run, _), (key, rel) in sorted(consumer.latest.items())
              if run_id is None or run == run_id]
    if schema is not None and latest and latest[0][1].d != schema.d:
        raise click.UsageError(f"--schema has {schema.d} columns, the releases have "
                               f"d = {latest[0][1].d}")
    points = consumer.merge_latest(run_id=run_id, schema=schema)
    per_partition = ", ".join(f"partition {k.partition}: t {r.t} (sequence {k.sequence})"
                              for k, r in latest)
    click.echo(f"merged dataset: {len(points)} points from {len(latest)} partitions"
               + (f" ({per_partition})" if latest else ""))
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    d = latest[0][1].d if latest else (schema.d if schema is not None else 0)
    names = schema.names if schema is not None else tuple(f"x{i}" for i in range(d))
    write_points_csv(out / "merged.csv", points, names)
    described = [{"run_id": k.run_id, "partition": k.partition, "sequence": k.sequence,
                  "t": r.t, "depth": r.depth, "d": r.d, "epsilon": r.metadata.get("epsilon")}
                 for k, r in latest]
    (out / "releases.json").write_text(json.dumps(described, indent=2) + "\n")
    units = "original units of --schema" if schema is not None else "[0,1]^d"
    click.echo(f"wrote {out / 'merged.csv'} ({len(points)} points, {units}) and "
               f"{out / 'releases.json'}")
