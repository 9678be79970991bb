"""Crash recovery on a real broker: SIGKILL at exact points, and at random times.

The worker kills itself with SIGKILL at a chosen point of the commit protocol
(``DPSYNTH_CRASH_AT``, ``dpsynth.stream.crash``), or the test kills it at random moments while
records keep arriving; then a worker restarts on the same data directory and group. Checked
every time: the consumer library yields exactly the releases of an uninterrupted (embedded) run,
each once; every record on the synthetic topic, duplicates included, is byte-identical to the
embedded engine's; the final t equals the number of records (none lost, none counted twice).
"""

from __future__ import annotations

import random
import signal
import threading
import time

import numpy as np
import pytest

from dpsynth.client.consumer import ReleaseConsumer
from dpsynth.testing.kafka import (
    WorkerProcess,
    create_topics,
    encode_records,
    produce_messages,
    read_topic,
    records_of,
    unique_topics,
    worker_env,
    write_schema,
)
from tests.support.embedded import check_against_embedded, embedded_release_records

pytestmark = pytest.mark.kafka

RELEASE_EVERY = 1000
PER_MESSAGE = 130  # not a divisor of RELEASE_EVERY: batches end mid-tick


def _messages(points: np.ndarray) -> list[tuple[int, bytes]]:
    return [(0, encode_records(records_of(points[i:i + PER_MESSAGE])))
            for i in range(0, len(points), PER_MESSAGE)]


def _expected(points: np.ndarray) -> dict:
    per_sequence = embedded_release_records(
        points, epsilon=1.0, release_every=RELEASE_EVERY, max_depth=12, run_id="test-run",
        partition=0,
    )
    return {(0, s): r for s, r in per_sequence.items()}


def _finished(n: int, last_offset: int):
    def predicate(m: dict) -> bool:
        return (m.get("dpsynth_t", {}).get("0") == n
                and m.get("dpsynth_watermark", {}).get("0") == last_offset)
    return predicate


def _check_consumer_library(bootstrap: str, topic: str, expected: dict) -> None:
    with ReleaseConsumer(bootstrap, topic, run_id="test-run") as consumer:
        events = list(consumer.releases(idle_s=3))
    keys = [(e.key.partition, e.key.sequence) for e in events]
    assert len(keys) == len(set(keys)), "the consumer library yielded a duplicate"
    assert sorted(keys) == sorted(expected)


@pytest.mark.parametrize(("point", "visit"), [
    ("mid_tick", 3),
    ("mid_release", 2),
    ("after_release_produced", 2),
    ("after_state_commit_before_ack", 2),
])
def test_sigkill_at_a_commit_step_then_restart(kafka_bootstrap, tmp_path, point, visit):
    n = 12_000
    points = np.random.default_rng(11).random((n, 2))
    messages = _messages(points)
    topics = unique_topics(f"crash-{point.replace('_', '-')}")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    produce_messages(kafka_bootstrap, topics.input, messages)
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", batch_max_events=4, release_linger_s=0,
                     group_instance_id="worker-0")
    log = tmp_path / "worker.log"

    crashing = WorkerProcess({**env, "DPSYNTH_CRASH_AT": f"{point}:{visit}"}, log).start()
    status = crashing.wait_exit(120)
    crashing.stop()
    assert status == -signal.SIGKILL, crashing.log_tail()
    assert f"DPSYNTH_CRASH_AT={point}:{visit} reached" in log.read_text()

    with WorkerProcess(env, log) as worker:
        metrics = worker.wait_for(_finished(n, len(messages) - 1), timeout_s=120)
    if point == "after_state_commit_before_ack":
        assert metrics["dpsynth_records_skipped_total"]["0"] > 0  # re-delivered, not re-counted
    expected = _expected(points)
    stats = check_against_embedded(read_topic(kafka_bootstrap, topics.output), expected,
                                   "test-run")
    if point in ("mid_release", "after_release_produced"):
        assert stats["duplicates"] > 0  # re-produced after the crash, byte-identical
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
                     tmp_path / "data", batch_max_events=8, group_instance_id="worker-0")
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
    with WorkerProcess(env, log) as worker:
        worker.wait_for(_finished(n, len(messages) - 1), timeout_s=180)
    expected = _expected(points)
    check_against_embedded(read_topic(kafka_bootstrap, topics.output), expected, "test-run")
    _check_consumer_library(kafka_bootstrap, topics.output, expected)
