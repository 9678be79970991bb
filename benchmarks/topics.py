"""``python -m benchmarks topics``: records/s of ``dpsynth topics import`` and ``export``.

Layer: benchmark (confluent-kafka, a real broker: ``--bootstrap``, else a local one started in
``--kafka-dir`` and stopped at the end). One run:

1. write a recording of ``--records`` raw events (msgpack maps ``{"x", "y"}``, 27 bytes, the
   raw-events topic's records), round-robin over ``--partitions`` partitions, timestamps 1 ms
   apart ending now (so no retention deletes them);
2. per repeat, alternately: the **baseline** — the same records, decoded in memory beforehand,
   sent by a plain confluent-kafka producer with the import's settings (what the broker and
   client can take: the ceiling) — and the **import** — ``import_recording`` of the file into a
   fresh topic (reading, decoding and sending); then the **export** of that topic to a file;
3. medians over the repeats, the import as a ratio to the baseline, and the read-only decode
   rate of the file (no broker). Goal (issue 18): an import of 10^6 records at ≥ 10^5 records/s.

.. code-block:: console

    $ python -m benchmarks topics --records 1000000 --repeats 3
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import click
import msgpack
import numpy as np

from benchmarks.kafka import DEFAULT_KAFKA_DIR, bench_broker
from benchmarks.noise import machine_info
from dpsynth.client.recording import RecordingHeader, RecordingReader, RecordingWriter, TopicRecord
from dpsynth.client.transfer import (
    ensure_topic,
    export_topic,
    import_recording,
    topic_partitions,
)
from dpsynth.testing.kafka import end_offsets

GOAL = 100_000  # records/s of an import of 10^6 records (issue 18)


def write_recording(path: Path, records: int, partitions: int) -> float:
    """The benchmark's recording; returns the writer's records/s."""
    points = np.random.default_rng(0).random((records, 2)).tolist()
    now = int(time.time() * 1000)
    packer = msgpack.Packer()
    started = time.perf_counter()
    header = RecordingHeader(topic="bench-raw", partitions=partitions, role="raw",
                             sensitive=True, note="python -m benchmarks topics")
    with RecordingWriter(path, header, compresslevel=1) as writer:
        for i, (x, y) in enumerate(points):
            writer.write(TopicRecord(i % partitions, i // partitions, None,
                                     packer.pack({"x": x, "y": y}), now - records + i,
                                     "CreateTime"))
    return records / (time.perf_counter() - started)


def _baseline(bootstrap: str, records: list[TopicRecord], partitions: int) -> float:
    """A plain producer of the records, already decoded, with the import's settings."""
    from confluent_kafka import Producer

    topic = f"bench-baseline-{uuid.uuid4().hex[:8]}"
    ensure_topic(bootstrap, topic, partitions)
    failures: list[Any] = []
    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 50,
        "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576, "delivery.report.only.error": True,
        "on_delivery": lambda err, _msg: failures.append(err)})
    started = time.perf_counter()
    for r in records:
        try:
            producer.produce(topic, r.value, r.key, r.partition, timestamp=r.timestamp)
        except BufferError:
            producer.flush(1)
            producer.produce(topic, r.value, r.key, r.partition, timestamp=r.timestamp)
    remaining = producer.flush(120)
    seconds = time.perf_counter() - started
    assert not remaining and not failures, "baseline delivery failed"
    return len(records) / seconds


def run_topics_bench(bootstrap: str, records: int, partitions: int, repeats: int,
                     work: Path) -> dict[str, Any]:
    """Rates (records/s) of every step, per repeat and their medians."""
    path = work / "bench.ndjson.gz"
    write_rate = write_recording(path, records, partitions)
    started = time.perf_counter()
    with RecordingReader(path) as reader:
        decoded = list(reader)
    decode_rate = records / (time.perf_counter() - started)
    runs: dict[str, list[float]] = {"baseline": [], "import": [], "export": []}
    for repeat in range(repeats):
        runs["baseline"].append(_baseline(bootstrap, decoded, partitions))
        topic = f"bench-import-{uuid.uuid4().hex[:8]}"
        summary = import_recording(bootstrap, path, topic=topic)
        runs["import"].append(summary.records / summary.seconds)
        assert sum(end_offsets(bootstrap, topic).values()) == records
        assert topic_partitions(bootstrap, topic) == partitions
        out = work / f"export-{repeat}.ndjson.gz"
        exported = export_topic(bootstrap, topic, out, compresslevel=1)
        runs["export"].append(exported.records / exported.seconds)
    medians = {k: statistics.median(v) for k, v in runs.items()}
    return {
        "records": records, "partitions": partitions, "repeats": repeats,
        "file_bytes": path.stat().st_size, "write_rate": write_rate,
        "decode_rate": decode_rate, "runs": runs, "medians": medians,
        "import_vs_baseline": medians["import"] / medians["baseline"],
        "goal_met": medians["import"] >= GOAL, "machine": machine_info(),
    }


def format_report(report: dict[str, Any]) -> str:
    """The table printed by the command."""
    m, runs = report["medians"], report["runs"]
    rows = [
        ("write the recording (RecordingWriter, gzip level 1)", report["write_rate"], ""),
        ("decode the recording (RecordingReader, no broker)", report["decode_rate"], ""),
        ("baseline: plain producer of decoded records", m["baseline"], "1.00"),
        ("dpsynth topics import (read + decode + produce)", m["import"],
         f"{report['import_vs_baseline']:.2f}"),
        ("dpsynth topics export (consume + merge + write)", m["export"],
         f"{m['export'] / m['baseline']:.2f}"),
    ]
    lines = [f"{report['records']:,} records of 27 bytes, {report['partitions']} partitions, "
             f"file {report['file_bytes'] / 1e6:.1f} MB; medians of {report['repeats']} "
             f"repeats (load {report['machine']['loadavg_1m']}, {report['machine']['date']})",
             f"{'step':<55} {'records/s':>12} {'× baseline':>11}"]
    lines += [f"{name:<55} {rate:>12,.0f} {ratio:>11}" for name, rate, ratio in rows]
    lines.append("per repeat: " + "; ".join(
        f"{k} " + ", ".join(f"{v:,.0f}" for v in vals) for k, vals in runs.items()))
    verdict = "met" if report["goal_met"] else "NOT met"
    lines.append(f"goal: import of 10^6 records at >= {GOAL:,} records/s: {verdict}")
    return "\n".join(lines)


@click.command("topics")
@click.option("--bootstrap", help="A running broker (host:port); default: start a local one "
                                  "in --kafka-dir and stop it at the end.")
@click.option("--records", type=click.IntRange(min=1000), default=1_000_000, show_default=True)
@click.option("--partitions", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--kafka-dir", default=DEFAULT_KAFKA_DIR, show_default=True,
              help="Run directory of the broker started here.")
def bench_topics(bootstrap: str | None, records: int, partitions: int, repeats: int,
                 kafka_dir: str) -> None:
    """Records/s of importing and exporting a recording, against a plain producer."""
    with bench_broker(bootstrap, kafka_dir) as address, \
            tempfile.TemporaryDirectory() as work:
        report = run_topics_bench(address, records, partitions, repeats, Path(work))
    click.echo(format_report(report))
