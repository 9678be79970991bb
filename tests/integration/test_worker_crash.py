"""Crash recovery on a real broker: SIGKILL at exact points, and at random times.

The worker kills itself with SIGKILL at a chosen point of the commit protocol
(``DPSYNTH_CRASH_AT``, ``dpsynth.stream.crash``: before, during and after the transaction that
publishes releases and commits the input offset; after the state commit too in the unit tests), or
the test kills it at random moments while records keep arriving; then a worker restarts on the same
data directory and group. Ticks come from the record count (every 1000) and from tick markers:
markers written into the input between the records and the worker's own timer's
(``DPSYNTH_TICK_SECONDS=1``). Checked every time, by a **plain confluent-kafka consumer**
(``read_committed``, no dpsynth code: tests/support/plain_consumer.py): the synthetic topic holds
exactly the releases of the embedded engine replayed over the input partition as it is on the
broker, markers included — each once, complete, in order, byte for byte (0 duplicates, 0 gaps: what
an uninterrupted run publishes); the consumer library agrees; the final t equals the number of
records (none lost, none counted twice, markers never counted). A crash inside a transaction leaves
its records on the broker, visible to ``read_uncommitted`` only.
"""

from __future__ import annotations

import random
import signal
import threading
import time

import numpy as np
import pytest

from dpsynth.client.consumer import ReleaseConsumer
from dpsynth.schema import Schema
from dpsynth.testing.kafka import (
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
from tests.support.markers import (
    committed_watermark,
    counted_through,
    expected_points_through,
    input_values,
    marker,
)
from tests.support.plain_consumer import assert_exactly_once, read_all
from tests.support.startup import ONE_PARTITION, startup_phases

pytestmark = pytest.mark.kafka

RELEASE_EVERY = 1000
PER_MESSAGE = 130  # not a divisor of RELEASE_EVERY: batches end mid-tick
MARKER_EVERY = 11  # a tick marker after every 11th message (1430 records)
SCHEMA = Schema.from_dict({"version": 1, "columns": [
    {"name": "x", "lower": 0, "upper": 1}, {"name": "y", "lower": 0, "upper": 1}]})


def _messages(points: np.ndarray) -> list[tuple[int, bytes]]:
    out = []
    for k, i in enumerate(range(0, len(points), PER_MESSAGE)):
        out.append((0, encode_records(records_of(points[i:i + PER_MESSAGE]))))
        if k % MARKER_EVERY == MARKER_EVERY - 1:
            out.append((0, marker(0, 1000 * (k + 1))))  # old periods: before the timer's
    return out


def _expected(bootstrap: str, topics, data_dir, records) -> dict:
    """The embedded engine over the input partition (markers included), as far as published."""
    return expected_points_through(input_values(bootstrap, topics.input), SCHEMA,
                                   committed_watermark(data_dir) + 1, records, epsilon=1.0,
                                   release_every=RELEASE_EVERY, max_depth=12)


def _check_consumer_library(bootstrap: str, topic: str, expected: dict) -> None:
    with ReleaseConsumer(bootstrap, topic, run_id="test-run") as consumer:
        events = list(consumer.releases(idle_s=3))
    keys = [(e.key.partition, e.key.sequence) for e in events]
    assert len(keys) == len(set(keys)), "the consumer library yielded a duplicate"
    assert sorted(keys) == sorted(expected)


def _check_plain_consumer(bootstrap: str, topic: str, expected: dict) -> list:
    """What any read_committed consumer sees: each release once, complete, in order."""
    records = read_all(bootstrap, topic)
    assert assert_exactly_once(records, expected, "test-run") == len(expected)
    return records


@pytest.mark.parametrize(("point", "visit"), [
    ("mid_tick", 3),
    ("mid_release", 2),
    ("after_release_produced", 2),
    ("after_transaction_commit", 2),
])
def test_sigkill_at_a_commit_step_then_restart(kafka_bootstrap, tmp_path, point, visit):
    n = 12_000
    points = np.random.default_rng(11).random((n, 2))
    messages = _messages(points)
    topics = unique_topics(f"crash-{point.replace('_', '-')}")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    produce_messages(kafka_bootstrap, topics.input, messages)
    end = end_offsets(kafka_bootstrap, topics.input)[0]
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", batch_max_events=4, release_linger_s=0,
                     group_instance_id="worker-0", tick_seconds=1)
    log = tmp_path / "worker.log"

    crashing = WorkerProcess({**env, "DPSYNTH_CRASH_AT": f"{point}:{visit}"}, log).start()
    status = crashing.wait_exit(120)
    crashing.stop()
    assert status == -signal.SIGKILL, crashing.log_tail()
    first_start = log.read_text()
    assert f"DPSYNTH_CRASH_AT={point}:{visit} reached" in first_start

    with WorkerProcess(env, log) as worker:
        metrics = worker.wait_for(counted_through(n, end), timeout_s=120)
    # a log line per start-up phase, in order, both starts (no timing asserted)
    restart = log.read_text()[len(first_start):]
    for text in (first_start, restart):
        phases = startup_phases(text)
        assert [name for name, _ in phases][:len(ONE_PARTITION)] == ONE_PARTITION, phases
    assert "no local state" in first_start.split("restoring partition 0", 1)[1].splitlines()[0]
    if point == "after_transaction_commit":  # behind the group's offset: a replay phase too
        assert [n for n, _ in startup_phases(restart)].count("restoring partition 0") == 2
    if point == "after_transaction_commit":  # the state lagged the published offset
        assert metrics["dpsynth_releases_replayed_total"]["0"] > 0  # recomputed, not repeated
    records = read_topic(kafka_bootstrap, topics.output)
    expected = _expected(kafka_bootstrap, topics, tmp_path / "data", records)
    assert len(expected) > n // RELEASE_EVERY  # the markers added ticks
    stats = check_against_embedded(records, expected, "test-run")
    assert stats["duplicates"] == 0
    committed = _check_plain_consumer(kafka_bootstrap, topics.output, expected)
    uncommitted = read_all(kafka_bootstrap, topics.output, isolation="read_uncommitted")
    if point in ("mid_release", "after_release_produced"):
        assert len(uncommitted) > len(committed)  # the killed transaction's records, hidden
    _check_consumer_library(kafka_bootstrap, topics.output, expected)


@pytest.mark.slow
def test_random_sigkills_while_records_arrive(kafka_bootstrap, tmp_path):
    rng = random.Random(20261122)
    n = 30_000
    points = np.random.default_rng(12).random((n, 2))
    messages = _messages(points)
    topics = unique_topics("crash-random")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", batch_max_events=8, group_instance_id="worker-0",
                     tick_seconds=1)
    log = tmp_path / "worker.log"

    def feed() -> None:  # ~15 s of steady input while the worker is being killed
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
        for partition, value in messages:
            producer.produce(topics.input, value=value, partition=partition)
            producer.poll(0)
            time.sleep(15 / len(messages))
        assert producer.flush(60) == 0

    feeder = threading.Thread(target=feed)
    feeder.start()
    kills = 0
    try:
        for _ in range(4):
            worker = WorkerProcess(env, log).start()
            try:
                worker.wait_for(lambda m: "dpsynth_t" in m, timeout_s=60)  # partition loaded
                time.sleep(rng.uniform(0.2, 2.0))
                if worker.alive:
                    worker.kill()
                    kills += 1
            finally:
                worker.stop()
    finally:
        feeder.join()
    assert kills == 4
    end = end_offsets(kafka_bootstrap, topics.input)[0]
    with WorkerProcess(env, log) as worker:
        worker.wait_for(counted_through(n, end), timeout_s=180)
    records = read_topic(kafka_bootstrap, topics.output)
    expected = _expected(kafka_bootstrap, topics, tmp_path / "data", records)
    check_against_embedded(records, expected, "test-run")
    _check_plain_consumer(kafka_bootstrap, topics.output, expected)
    _check_consumer_library(kafka_bootstrap, topics.output, expected)
