"""Public time in the worker on a real broker (issue 13, docs/privacy.md P11 and P13).

- A quiet partition releases at the next tick marker: records stop in the middle of a step, and
  the worker's own tick marker (``DPSYNTH_TICK_SECONDS``) releases them — under replacement (a
  step every N records or at a marker) and under add/remove (only at markers). How soon is a
  matter of the period, not of this test (no wall-clock assertion: the wait is a hang guard).
  The releases are byte-identical to the embedded synthesizer replayed over the input
  partition as it is on the broker, markers included; under add/remove no release carries the
  count (a noisy size, no ``release_every``).
- Markers are on their own timer (an injected clock, the worker's loop in this process): a batch
  held while the clock passes several periods — one at a time, then several at once, as a
  writer that fell behind — skips no period: exactly one marker per period on the input topic,
  in order, and one step per marker in the releases (privacy: P11).
- A run id whose releases on the output topic carry another key fingerprint is refused at start.
"""

from __future__ import annotations

import numpy as np
import pytest
from confluent_kafka import Producer

from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import decode_release, encode_release
from dpsynth.schema import Schema
from dpsynth.stream.settings import load_config
from dpsynth.stream.ticks import parse_marker
from dpsynth.testing.kafka import (
    TEST_KEY_HEX,
    WorkerProcess,
    create_topics,
    encode_records,
    end_offsets,
    produce_messages,
    read_topic,
    records_of,
    unique_topics,
    worker_env,
    write_schema,
)
from tests.support.embedded import check_against_embedded
from tests.support.inprocess import Gate, running_worker, wait_until
from tests.support.markers import (
    ManualClock,
    committed_watermark,
    counted_through,
    embedded_points_from_input,
    expected_points_through,
    input_values,
)

pytestmark = pytest.mark.kafka

PERIOD = 3.0  # seconds between tick markers
PER_MESSAGE = 100
SCHEMA = Schema.from_dict({"version": 1, "columns": [
    {"name": "x", "lower": 0, "upper": 1}, {"name": "y", "lower": 0, "upper": 1}]})


@pytest.mark.parametrize("neighbours", ["replace", "add_remove"])
def test_a_quiet_partition_releases_at_the_next_tick_marker(kafka_bootstrap, tmp_path,
                                                           neighbours):
    n = 1500  # under replacement: one release at 1000 records, the rest waits for a marker
    points = np.random.default_rng(31).random((n, 2))
    messages = [(0, encode_records(records_of(points[i:i + PER_MESSAGE])))
                for i in range(0, n, PER_MESSAGE)]
    topics = unique_topics(f"quiet-{neighbours.replace('_', '-')}")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    extra = {"release_every": 1000} if neighbours == "replace" else {}
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", neighbours=neighbours, mechanism="adaptive",
                     tick_seconds=PERIOD, **extra)
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        worker.wait_for(lambda m: "dpsynth_t" in m, timeout_s=90)  # partition loaded
        produce_messages(kafka_bootstrap, topics.input, messages)
        end = end_offsets(kafka_bootstrap, topics.input)[0]  # data (and markers) before it
        metrics = worker.wait_for(counted_through(n, end), timeout_s=60)  # a hang guard
    assert metrics["dpsynth_tick_markers_written_total"]["0"] >= 1
    values = input_values(kafka_bootstrap, topics.input)
    watermark = committed_watermark(tmp_path / "data")

    records = read_topic(kafka_bootstrap, topics.output)
    expected = expected_points_through(values, SCHEMA, watermark + 1, records, epsilon=1.0,
                                       release_every=1000, max_depth=12,
                                       neighbours=neighbours, mechanism="adaptive")
    check_against_embedded(records, expected, "test-run")
    releases = [decode_release(expected[k]) for k in sorted(expected)]
    if neighbours == "replace":
        assert [r.t for r in releases][:2] == [1000, n]  # the tail, at a marker
    else:  # privacy: P11 — the count is in no release
        for release in releases:
            assert release.metadata["release_every"] is None
            assert release.t == int(release.leaf_counts.sum())
        assert [r.metadata["step"] for r in releases] == list(range(1, len(releases) + 1))


def test_P11_a_batch_slower_than_several_periods_skips_no_period(kafka_bootstrap, tmp_path):
    period_s, n = 60.0, 1500
    points = np.random.default_rng(32).random((n, 2))
    messages = [(0, encode_records(records_of(points[i:i + PER_MESSAGE])))
                for i in range(0, n, PER_MESSAGE)]
    topics = unique_topics("slow-batch")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    config = load_config(worker_env(
        kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"), tmp_path / "data",
        neighbours="add_remove", mechanism="adaptive", tick_seconds=period_s))
    clock, gate = ManualClock(1_000_000.0), Gate()
    with running_worker(config, clock, gate) as operator:
        def written() -> float:
            return operator.metrics.get("tick_markers_written", 0)

        wait_until(lambda: written() == 1)  # the current period's, at the assignment
        produce_messages(kafka_bootstrap, topics.input, messages)
        wait_until(gate.entered.is_set)  # the first batch of records is held: a slow batch
        for k in range(2, 5):  # three periods pass, one at a time
            clock.advance(period_s)
            wait_until(lambda k=k: written() == k)
        clock.advance(3 * period_s)  # three at once: the writer is behind
        wait_until(lambda: written() == 7)
        gate.open()
        end = end_offsets(kafka_bootstrap, topics.input)[0]
        wait_until(lambda: 0 in operator.processors
                   and operator.processors[0].published >= end - 1)
    values = input_values(kafka_bootstrap, topics.input)
    found = [m for m in map(parse_marker, values) if m is not None]
    first = int(1_000_000 // period_s * period_s * 1000)
    assert [m.at_ms for m in found] == [first + k * 60_000 for k in range(7)]  # none skipped
    reference = {(0, s): r for s, r in embedded_points_from_input(
        values, SCHEMA, epsilon=1.0, release_every=1000, max_depth=12, neighbours="add_remove",
        mechanism="adaptive").items()}
    records = read_topic(kafka_bootstrap, topics.output)
    check_against_embedded(records, reference, "test-run")
    releases = [decode_release(reference[k]) for k in sorted(reference)]
    assert [r.metadata["step"] for r in releases] == list(range(1, 8))  # a step per period


def test_P13_a_run_id_published_under_another_key_is_refused(kafka_bootstrap, tmp_path):
    topics = unique_topics("key-check")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    other = OnlineSynthesizer(2, 1.0, bytes(32), 10)  # another key, same run id
    release = other.extend(np.random.default_rng(1).random((10, 2)))[0]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for record in encode_release(release, run_id="test-run", partition=0, sequence=1):
        producer.produce(topics.output, key=b"test-run/0/1", value=record)
    assert producer.flush(30) == 0
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data")
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    status = worker.wait_exit(60)
    worker.stop()
    log = (tmp_path / "worker.log").read_text()
    assert status == 1, log  # a configuration refused at start (dpsynth.cli.errors)
    assert "DPSYNTH_RUN_ID ('test-run')" in log and "another noise key" in log
    assert TEST_KEY_HEX not in log
    assert not (tmp_path / "data" / "state").exists()  # nothing was published or stored
