"""``dpsynth produce``: records into the raw-events topic.

Layer: adapter (confluent-kafka, click, rich; no DP arithmetic). Sends a CSV/NDJSON file, a data
set of ``DPSYNTH_DATA_DIR`` or a generated stream to the raw-events topic as msgpack: one record
per message as a map (``--batch 1``), else a list of up to ``--batch`` maps per message (what the
worker decodes). Idempotent producer (``enable.idempotence``: no duplicates from the producer's
own retries), progress bar, records/s at the end. The raw-events topic holds the sensitive
input: nothing here prints a record's value.

.. code-block:: console

    $ dpsynth produce --generate 100000 --batch 1000 --partitions 1
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import msgpack
import numpy as np
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from dpsynth import datasets
from dpsynth.cli.common import read_records
from dpsynth.cli.errors import fail_on_dpsynth_error
from dpsynth.cli.kafka import (
    METADATA_TIMEOUT,
    bootstrap_option,
    cluster_metadata,
    kafka_module,
    resolve_bootstrap,
)
from dpsynth.schema import Schema

#: Field names of generated and data-set records when no ``--schema`` names them (d = 2).
DEFAULT_FIELDS = ("x", "y")
#: librdkafka's default ``message.max.bytes``: a message above it is refused by the client.
MAX_MESSAGE_BYTES = 1_000_000




# -- produce: inputs -----------------------------------------------------------------------------


@dataclass
class Records:
    """What ``produce`` sends: the records (maps of field to value) and where they came from."""

    label: str
    records: list[Any]


def _points_to_records(points: np.ndarray, schema: Schema | None) -> list[dict[str, float]]:
    """Points in [0,1]^d as records: in the schema's units and names, else x, y in [0,1]."""
    if schema is not None:
        if schema.d != points.shape[1]:
            raise click.UsageError(
                f"--schema has {schema.d} columns; the stream has d = {points.shape[1]}"
            )
        return schema.records_from_unit(points)
    names = DEFAULT_FIELDS if points.shape[1] == 2 else tuple(
        f"x{i}" for i in range(points.shape[1]))
    return [dict(zip(names, row, strict=True)) for row in points.tolist()]


#: Column names read as Gowalla's coordinates in a ``--schema`` (degrees), lower case.
GOWALLA_COLUMNS = {"lon": ("lon", "lng", "longitude"), "lat": ("lat", "latitude")}


def _gowalla_records(path: Path, schema: Schema | None) -> Records:
    """Gowalla check-ins: x = lon, y = lat in [0,1] without a schema; with one, each column
    named like a longitude or a latitude gets that coordinate in degrees (the data's units:
    the worker clips them to the schema's bounds, as it would a real producer's)."""
    if schema is None:
        points = datasets.load_gowalla(path)
        return Records(f"Gowalla NYC check-ins ({len(points):,}, time order, x = lon, "
                       "y = lat in [0,1])", _points_to_records(points, None))
    columns = []
    for name in schema.names:
        coordinate = next((c for c, aliases in GOWALLA_COLUMNS.items()
                           if name.lower() in aliases), None)
        if coordinate is None:
            raise click.UsageError(
                f"--dataset gowalla: --schema column {name!r} is neither a longitude nor a "
                f"latitude; name the columns {GOWALLA_COLUMNS['lat'][0]!r} and "
                f"{GOWALLA_COLUMNS['lon'][0]!r} (degrees), as schemas/example-schema.json does"
            )
        columns.append(0 if coordinate == "lon" else 1)
    degrees = datasets.load_gowalla_degrees(path)[:, columns]
    names = schema.names
    records = [dict(zip(names, row, strict=True)) for row in degrees.tolist()]
    return Records(f"Gowalla NYC check-ins ({len(records):,}, time order, "
                   f"{', '.join(names)} in degrees)", records)


def load_records(
    input_path: Path | None, dataset: str | None, generate: int | None, seed: int,
    schema: Schema | None,
) -> Records:
    """The records named by exactly one of ``--input``, ``--dataset``, ``--generate``."""
    given = [name for name, value in (("--input", input_path), ("--dataset", dataset),
                                      ("--generate", generate)) if value is not None]
    if len(given) != 1:
        raise click.UsageError(
            "give exactly one of --input FILE, --dataset gowalla or --generate N"
            + (f" (got {', '.join(given)})" if given else "")
        )
    if input_path is not None:
        records = read_records(input_path)
        label = f"{input_path} ({len(records):,} records, sent as they are)"
        if schema is not None:
            _, _, rejects = schema.split_valid(records)
            if rejects:
                label += (f"; {len(rejects):,} of them do not fit --schema and will be "
                          "dead-lettered by the worker")
        return Records(label, records)
    if dataset is not None:
        path = datasets.gowalla_path()
        if not path.is_file():
            raise click.UsageError(
                f"dataset gowalla: {path} is missing (see ../shared/data/README.md); "
                "pass --input FILE or --generate N"
            )
        return _gowalla_records(path, schema)
    assert generate is not None
    d = schema.d if schema is not None else 2
    points = datasets.drifting_blobs(generate, seed, d=d)
    units = "in the --schema's units" if schema is not None else "in [0,1]^2"
    return Records(
        f"generated stream: {generate:,} records, drifting Gaussian blobs (seed {seed}), {units}",
        _points_to_records(points, schema),
    )


def pack_messages(records: Sequence[Any], batch: int) -> Iterator[tuple[int, bytes]]:
    """(records in the message, msgpack bytes): a map when ``batch == 1``, else a list of maps.

    >>> [(n, msgpack.unpackb(m)) for n, m in pack_messages([{"x": 1}, {"x": 2}, {"x": 3}], 2)]
    [(2, [{'x': 1}, {'x': 2}]), (1, [{'x': 3}])]
    >>> [msgpack.unpackb(m) for _, m in pack_messages([{"x": 1}], 1)]
    [{'x': 1}]
    """
    packer = msgpack.Packer(use_bin_type=True)
    for start in range(0, len(records), batch):
        part = records[start:start + batch]
        yield len(part), packer.pack(part[0] if batch == 1 else list(part))


# -- produce: topic and partitions ---------------------------------------------------------------


def ensure_topic(
    admin: Any, bootstrap: str, topic: str, partitions: int | None, replication: int,
    console: Console,
) -> int:
    """Create ``topic`` if missing (``partitions``, default 1); return its partition count."""
    kafka = kafka_module()
    metadata = cluster_metadata(admin, bootstrap)
    existing = metadata.topics.get(topic)
    if existing is not None and existing.error is None and existing.partitions:
        count = len(existing.partitions)
        if partitions is not None and partitions != count:
            console.print(f"[yellow]topic {topic} exists with {count} partitions; "
                          f"--partitions {partitions} ignored (never altered here)[/]")
        return count
    wanted = partitions or 1
    if partitions is None:
        console.print(f"topic {topic} is missing: creating it with 1 partition "
                      "(--partitions P to choose)")
    future = admin.create_topics(
        [kafka.admin.NewTopic(topic, num_partitions=wanted, replication_factor=replication)],
        operation_timeout=METADATA_TIMEOUT,
    )[topic]
    try:
        future.result(timeout=METADATA_TIMEOUT)
    except kafka.KafkaException as e:
        error = e.args[0] if e.args else None
        if getattr(error, "code", lambda: None)() != kafka.KafkaError.TOPIC_ALREADY_EXISTS:
            raise click.ClickException(f"cannot create topic {topic}: {e}") from None
    deadline = time.monotonic() + METADATA_TIMEOUT
    while time.monotonic() < deadline:  # wait until the new topic's metadata has propagated
        described = admin.list_topics(topic, timeout=METADATA_TIMEOUT).topics.get(topic)
        if described is not None and described.error is None and described.partitions:
            return len(described.partitions)
        time.sleep(0.1)
    raise click.ClickException(f"topic {topic} was created but has no metadata after "
                               f"{METADATA_TIMEOUT:g} s")


# -- produce: the command ------------------------------------------------------------------------


@dataclass
class _Delivery:
    """Delivery reports, counted from the producer's callback (runs inside poll/flush)."""

    records: int = 0
    messages: int = 0
    error: str | None = None
    failed: int = 0


@click.command()
@bootstrap_option
@click.option("--topic",
              default=lambda: os.environ.get("DPSYNTH_INPUT_TOPIC") or "dpsynth-raw-events",
              show_default="$DPSYNTH_INPUT_TOPIC, else dpsynth-raw-events",
              help="The raw-events topic.")
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False,
                                                       path_type=Path),
              help="CSV with a header, or NDJSON of objects (.gz allowed): sent as they are.")
@click.option("--dataset", type=click.Choice(["gowalla"]),
              help="A data set of ../shared/data, in time order.")
@click.option("--generate", type=click.IntRange(min=1), metavar="N",
              help="N records of the generated stream (drifting Gaussian blobs).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the generated stream (a workload, not privacy noise).")
@click.option("--schema", "schema_path",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Schema JSON (schemas/): --generate/--dataset records are written in its "
                   "column names and units; with --input, records it would reject are counted "
                   "(and still sent: the worker dead-letters them).")
@click.option("--batch", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Records per message (1: one msgpack map; more: a list of maps).")
@click.option("--partitions", type=click.IntRange(min=1),
              help="Create the topic with P partitions if it is missing (default 1).")
@click.option("--replication-factor", "replication", type=int, default=-1, show_default=True,
              help="Replication factor of a topic created here (-1: the broker's default).")
@click.option("--key-by", type=click.Choice(["round-robin", "hash"]), default="round-robin",
              show_default=True,
              help="round-robin: message i goes to partition i mod P (no key); hash: keyed by "
                   "the message index, partitioned by murmur2 like the Java client.")
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
              default="none", show_default=True,
              help="Compression codec (the worker's aiokafka needs the matching package for "
                   "all but gzip).")
@click.option("--timeout", type=click.FloatRange(min=1), default=120.0, show_default=True,
              help="Seconds a message may wait for delivery before the command fails.")
@fail_on_dpsynth_error
def produce(bootstrap: str | None, topic: str, input_path: Path | None, dataset: str | None,
            generate: int | None, seed: int, schema_path: Path | None, batch: int,
            partitions: int | None, replication: int, key_by: str, compression: str,
            timeout: float) -> None:
    """Send records to the raw-events topic as msgpack (idempotent producer)."""
    kafka = kafka_module()
    console = Console(stderr=True)
    servers = resolve_bootstrap(bootstrap)
    schema = Schema.from_json_file(schema_path) if schema_path is not None else None
    source = load_records(input_path, dataset, generate, seed, schema)
    console.print(f"input: {source.label}")
    admin = kafka.admin.AdminClient({"bootstrap.servers": servers})
    n_partitions = ensure_topic(admin, servers, topic, partitions, replication, console)
    producer = kafka.Producer({
        "bootstrap.servers": servers,
        "client.id": "dpsynth-produce",
        "enable.idempotence": True,  # acks=all, no duplicates or reordering from retries
        "linger.ms": 5,
        "compression.type": compression,
        "message.timeout.ms": int(timeout * 1000),
        "partitioner": "murmur2_random",  # the Java client's partitioner, for --key-by hash
    })
    delivery = _Delivery()
    total = len(source.records)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("records"), TimeElapsedColumn(), TimeRemainingColumn())
    sent_bytes = sent_messages = 0
    started = time.perf_counter()
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"→ {topic}", total=total)

        def delivered(err: Any, size: int) -> None:
            if err is not None:
                delivery.failed += size
                delivery.error = delivery.error or str(err)
                return
            delivery.records += size
            delivery.messages += 1
            progress.advance(task, size)

        # every message holds `batch` records except perhaps the last: two callbacks suffice
        full = lambda err, msg: delivered(err, batch)  # noqa: E731
        last_size = total - (total - 1) // batch * batch if total else 0
        last = lambda err, msg: delivered(err, last_size)  # noqa: E731
        n_messages = -(-total // batch)
        for index, (_, payload) in enumerate(pack_messages(source.records, batch)):
            if len(payload) > MAX_MESSAGE_BYTES:
                raise click.ClickException(
                    f"message {index} ({len(payload):,} bytes) exceeds {MAX_MESSAGE_BYTES:,} "
                    "bytes; lower --batch"
                )
            callback = last if index == n_messages - 1 else full
            while True:
                try:
                    if key_by == "round-robin":
                        producer.produce(topic, payload, partition=index % n_partitions,
                                         on_delivery=callback)
                    else:
                        producer.produce(topic, payload, key=index.to_bytes(8, "big"),
                                         on_delivery=callback)
                    break
                except BufferError:  # the local queue is full: serve delivery reports
                    producer.poll(0.05)
            sent_bytes += len(payload)
            sent_messages += 1
            if index % 256 == 0:
                producer.poll(0)
                if delivery.error is not None:
                    break
        remaining = producer.flush(timeout)
    elapsed = time.perf_counter() - started
    if delivery.error is not None or remaining:
        reason = delivery.error or f"{remaining} messages still undelivered after {timeout:g} s"
        raise click.ClickException(
            f"delivery failed after {delivery.records:,} of {total:,} records: {reason}"
        )
    rate = delivery.records / elapsed if elapsed > 0 else float("inf")
    click.echo(
        f"produced {delivery.records:,} records in {sent_messages:,} messages "
        f"({sent_bytes:,} bytes, --batch {batch}) to {topic} ({n_partitions} partition"
        f"{'s' if n_partitions != 1 else ''}, {key_by}) in {elapsed:.2f} s: "
        f"{rate:,.0f} records/s"
    )


