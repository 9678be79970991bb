"""Read dpsynth's materialised points with pyarrow and confluent-kafka only: no dpsynth.

A worker run with ``DPSYNTH_POINTS_FORMAT=arrow`` publishes, next to every release, its points
in the schema's units as Arrow IPC streams on ``DPSYNTH_POINTS_TOPIC`` (dpsynth's
schemas/README.md, "Materialised points"). Each Kafka record is one complete stream: a table
with one float64 column per schema column, and under the schema metadata key ``dpsynth`` a JSON
object naming the chunk: ``run_id``, ``partition``, ``sequence``, ``chunk`` of ``n_chunks``,
``first_row``, ``rows``, ``t``. This script assembles the chunks of each release, drops
duplicates (a worker that retries after a crash writes byte-identical records again) and
prints the latest release of every input partition as CSV::

    $ pip install pyarrow confluent-kafka
    $ python examples/points/read_points.py --bootstrap localhost:29092 \\
        --topic dpsynth-synthetic-points > latest.csv

The whole point of the format is that this file needs nothing from dpsynth; copy it freely.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.ipc

Identity = tuple[str, int, int]  # (run_id, input partition, sequence)


def decode_chunk(value: bytes) -> tuple[dict, pa.Table]:
    """One record: its description (the ``dpsynth`` JSON object) and its rows."""
    table = pyarrow.ipc.open_stream(value).read_all()
    description = json.loads(table.schema.metadata[b"dpsynth"])
    if description.get("format") != "dpsynth.points" or description.get("version") != 1:
        raise ValueError(f"not dpsynth.points version 1: {description.get('format')!r}")
    if table.num_rows != description["rows"]:
        raise ValueError("a chunk's row count differs from its description")
    return description, table


class PointsAssembler:
    """Chunks in any order and with duplicates in; each complete release out, once."""

    def __init__(self) -> None:
        self.pending: dict[Identity, dict[int, tuple[dict, pa.Table]]] = {}
        self.complete: set[Identity] = set()
        self.latest: dict[tuple[str, int], tuple[dict, pa.Table]] = {}

    def add(self, value: bytes) -> tuple[dict, pa.Table] | None:
        """Take one record; return (description, all rows) when it completes a release."""
        description, table = decode_chunk(value)
        identity = (description["run_id"], description["partition"], description["sequence"])
        if identity in self.complete:
            return None  # a duplicate of a release already assembled
        chunks = self.pending.setdefault(identity, {})
        chunks[description["chunk"]] = (description, table)  # a duplicate chunk: same rows
        if len(chunks) < description["n_chunks"]:
            return None
        del self.pending[identity]
        self.complete.add(identity)
        parts = [chunks[i][1].replace_schema_metadata(None)
                 for i in range(description["n_chunks"])]
        rows = pa.concat_tables(parts)
        if rows.num_rows != description["t"]:
            raise ValueError(f"release {identity}: {rows.num_rows} rows, t = {description['t']}")
        whole = {k: v for k, v in description.items()
                 if k not in ("chunk", "first_row", "rows")}
        slot = identity[:2]
        if slot not in self.latest or self.latest[slot][0]["sequence"] < identity[2]:
            self.latest[slot] = (whole, rows)
        return whole, rows


def read_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> Iterator[bytes]:
    """Every record value of ``topic`` up to its current end (read_committed).

    The end is where the broker says a partition ends (an end-of-partition event), not the
    last record's offset + 1: the worker writes in transactions, whose commit markers take
    offsets of their own that no consumer receives.
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-points",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    try:
        partitions = consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                  timeout=timeout_s)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        behind = {p for p, end in ends.items() if end > 0}
        while behind:
            message = consumer.poll(timeout_s)
            if message is None:
                raise TimeoutError(f"partitions {sorted(behind)} of {topic} not read to the end")
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    behind.discard(message.partition())
                continue
            yield message.value()
    finally:
        consumer.close()


def write_csv(latest: dict[tuple[str, int], tuple[dict, pa.Table]], out: Iterable) -> None:
    """``run_id,partition,sequence,<columns>``: one line per point (shortest exact floats)."""
    writer = csv.writer(out)
    header = False
    for (run_id, partition), (description, rows) in sorted(latest.items()):
        if not header:
            writer.writerow(["run_id", "partition", "sequence", *rows.column_names])
            header = True
        columns = [rows.column(i).to_pylist() for i in range(rows.num_columns)]
        for values in zip(*columns, strict=True):
            writer.writerow([run_id, partition, description["sequence"],
                             *(repr(v) for v in values)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--topic", default="dpsynth-synthetic-points")
    args = parser.parse_args(argv)
    assembler = PointsAssembler()
    for value in read_topic(args.bootstrap, args.topic):
        assembler.add(value)
    write_csv(assembler.latest, sys.stdout)


if __name__ == "__main__":
    main()
