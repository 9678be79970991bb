"""A recorded raw topic replayed into a fresh broker reproduces the recorded releases (issue 18).

On the session's broker a worker consumes two input partitions of records — with a bad message
that it dead-letters — and writes tick markers into them every second (the first half of the
records is applied and committed, with a marker after it, before the second half is sent, so
markers end ticks mid-stream). The raw-events, synthetic and dead-letter topics are exported
with ``dpsynth topics export``. Then a **second, fresh broker** is started; the raw recording is
imported (``dpsynth topics import``: same topic name and partitions), and a worker with the same
key and run id and an empty data directory, writing no markers of its own, consumes it.

The releases on the fresh broker, after the consumer library's de-duplication, equal the
recorded ones byte for byte; so do the dead letters. The markers round-trip: they are records
of the raw topic, and without them the releases would differ (some ticks end at a marker).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from dpsynth.cli.topics import topics as topics_cli
from dpsynth.client.consumer import ReleaseConsumer, ReleaseTracker
from dpsynth.client.content import MARKER_KEY
from dpsynth.client.recording import RecordingReader, TopicRecord
from dpsynth.testing import broker
from dpsynth.testing.kafka import (
    WorkerProcess,
    create_topics,
    encode_records,
    end_offsets,
    produce_messages,
    records_of,
    unique_topics,
    worker_env,
    write_schema,
)
from tests.support.markers import counted_through

pytestmark = pytest.mark.kafka

PER_MESSAGE = 100
HALF = 1500  # records per partition before the pause, and after it


@pytest.fixture(scope="module")
def fresh_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second broker of its own (own run dir, port and storage), stopped at the end."""
    missing = broker.missing_prerequisites()
    if missing:
        pytest.skip(f"a second local broker needs {missing}")
    with broker.local_broker(tmp_path_factory.mktemp("fresh-kafka")) as bootstrap:
        yield bootstrap


def _cli(*args: str) -> str:
    result = CliRunner().invoke(topics_cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _messages(points: np.ndarray, partition: int) -> list[tuple[int, bytes]]:
    return [(partition, encode_records(records_of(points[i:i + PER_MESSAGE])))
            for i in range(0, len(points), PER_MESSAGE)]


def _done(n: int, ends: dict[int, int]) -> Any:
    checks = [counted_through(n, end, str(p)) for p, end in ends.items()]
    return lambda m: all(check(m) for check in checks)


def _read(path: Path) -> tuple[Any, list[TopicRecord]]:
    with RecordingReader(path) as reader:
        return reader.header, list(reader)


def _releases(records: list[TopicRecord]) -> dict[Any, Any]:
    """(run, partition, sequence) → release, each once, as the consumer library yields them."""
    tracker = ReleaseTracker()
    events = [tracker.add(r.key, r.value, r.partition, r.offset) for r in records]
    assert tracker.rejected == 0
    return {e.key: e.release for e in events if e is not None}


def test_imported_raw_topic_reproduces_the_recorded_releases_on_a_fresh_broker(
    kafka_bootstrap: str, fresh_broker: str, tmp_path: Path
) -> None:
    topics = unique_topics("recorded")
    create_topics(kafka_bootstrap, {topics.input: 2, topics.output: 2, topics.dead_letter: 1})
    points = {p: np.random.default_rng(40 + p).random((2 * HALF, 2)) for p in (0, 1)}
    schema = write_schema(tmp_path / "schema.json")
    env = worker_env(kafka_bootstrap, topics, schema, tmp_path / "data-a", tick_seconds=1)
    with WorkerProcess(env, tmp_path / "a.log") as worker:
        for half in (slice(0, HALF), slice(HALF, 2 * HALF)):
            messages = [m for p in (0, 1) for m in _messages(points[p][half], p)]
            if half.start == 0:
                messages.append((0, b"\xc1 not msgpack"))  # dead-lettered, not counted
            produce_messages(kafka_bootstrap, topics.input, messages)
            ends = end_offsets(kafka_bootstrap, topics.input)  # the next offsets: markers
            worker.wait_for(_done(half.stop, ends), timeout_s=180)
    recorded = {kind: tmp_path / f"{kind}.ndjson.gz" for kind in ("raw", "synthetic", "dead")}
    for kind, topic in (("raw", topics.input), ("synthetic", topics.output),
                        ("dead", topics.dead_letter)):
        _cli("export", "--bootstrap", kafka_bootstrap, "--topic", topic, "--out",
             str(recorded[kind]))
    raw_header, raw = _read(recorded["raw"])
    synthetic_header, synthetic = _read(recorded["synthetic"])
    assert (raw_header.role, raw_header.run_id, raw_header.sensitive) == ("raw", "test-run",
                                                                          True)
    assert (synthetic_header.role, synthetic_header.run_id) == ("synthetic", "test-run")
    assert synthetic_header.release["epsilon"] == 1.0 and not synthetic_header.sensitive
    markers = [r for r in raw if MARKER_KEY.encode() in (r.value or b"")[:24]]
    assert {r.partition for r in markers} == {0, 1}
    expected = _releases(synthetic)
    assert any(rel.t % 1000 for rel in expected.values())  # some ticks ended at a marker

    # a fresh broker: the raw recording, then the worker with the same key and run id
    output = _cli("import", str(recorded["raw"]), "--bootstrap", fresh_broker)
    assert f"into {topics.input} (2 partitions" in output
    create_topics(fresh_broker, {topics.output: 2, topics.dead_letter: 1})
    ends = {p: end - 1 for p, end in end_offsets(fresh_broker, topics.input).items()}
    again = worker_env(fresh_broker, topics, schema, tmp_path / "data-b", tick_seconds=0)
    with WorkerProcess(again, tmp_path / "b.log") as worker:
        worker.wait_for(_done(2 * HALF, ends), timeout_s=180)
    with ReleaseConsumer(fresh_broker, topics.output, run_id="test-run") as consumer:
        replayed = {e.key: e.release for e in consumer.read_to_end()}
        assert consumer.rejected == 0
    assert replayed == expected  # every release, each once, equal
    copy = tmp_path / "synthetic-again.ndjson.gz"
    _cli("export", "--bootstrap", fresh_broker, "--topic", topics.output, "--out", str(copy))
    again_records = _read(copy)[1]
    assert {(r.key, r.value) for r in again_records} == {(r.key, r.value) for r in synthetic}
    dead_again = tmp_path / "dead-again.ndjson.gz"
    _cli("export", "--bootstrap", fresh_broker, "--topic", topics.dead_letter, "--out",
         str(dead_again))
    dead, dead_replayed = _read(recorded["dead"])[1], _read(dead_again)[1]
    assert len(dead) == 1 and [(r.key, r.value) for r in dead_replayed] == [
        (r.key, r.value) for r in dead]
