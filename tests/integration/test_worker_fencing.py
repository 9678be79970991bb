"""A fenced static member joins again; a worker fenced twice in a row stops (real broker).

Found by the three-node test (tests/integration/test_cluster.py) on a slow CI machine: the
group coordinator's node was killed, the worker's session expired before a new coordinator
answered, and the rejoin was refused with FENCED_INSTANCE_ID, a fatal librdkafka error that the
input loop logged as a warning; the consumer was dead and the worker waited for partitions
forever while its health checks passed. Here the same fencing is caused on purpose, by a second
consumer that joins the worker's group with the worker's ``group.instance.id``:

- once: the worker closes its partition's state, joins again with a new consumer, takes the
  partition back and counts every record exactly once (releases byte-identical to the embedded
  engine's);
- again and again (a second live worker with the same id, a misconfiguration): after
  ``REJOINS_PER_WINDOW`` rejoins within a minute the worker exits with status 3 and a message
  naming the setting to fix, instead of fencing it back forever.

And a session timeout the broker refuses (below its group.min.session.timeout.ms) ends the
worker at start with a message naming DPSYNTH_SESSION_TIMEOUT_S, instead of a JoinGroup retried
for ever.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from confluent_kafka import Consumer

from dpsynth.stream.intake import EXIT_FATAL, REJOINS_PER_WINDOW, is_fatal
from dpsynth.testing.kafka import (
    TEST_KEY_HEX,
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

INSTANCE = "fencing-test-worker"


def _impostor(bootstrap: str, group: str, topic: str) -> Consumer:
    """A consumer joining ``group`` as the worker's static member (it fences the worker)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "group.instance.id": INSTANCE, "enable.auto.commit": False,
                         "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1_000,
                         "log_level": 0})
    consumer.subscribe([topic])
    return consumer


def _poll_until_assigned(consumer: Consumer, timeout_s: float) -> bool:
    """Poll until the consumer holds a partition (False: fenced or timed out)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is not None and is_fatal(msg.error()):
            return False
        if consumer.assignment():
            return True
    return False


def _worker(kafka_bootstrap: str, tmp_path, prefix: str):  # type: ignore[no-untyped-def]
    """Topics and a worker (not started) that is the static member :data:`INSTANCE`."""
    topics = unique_topics(prefix)
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", tick_seconds=0, group_instance_id=INSTANCE)
    return topics, env, WorkerProcess(env, tmp_path / "worker.log")


def _send(bootstrap: str, topic: str, points: np.ndarray) -> None:
    produce_messages(bootstrap, topic, [(0, encode_records(records_of(points[i:i + 100])))
                                        for i in range(0, len(points), 100)])


def test_a_fenced_worker_joins_again_and_counts_every_record_once(kafka_bootstrap, tmp_path):
    points = np.random.default_rng(31).random((6000, 2))
    topics, env, worker = _worker(kafka_bootstrap, tmp_path, "fenced-once")
    with worker:
        worker.wait_ready(120)
        _send(kafka_bootstrap, topics.input, points[:3000])
        worker.wait_for(lambda m: m.get("dpsynth_t", {}).get("0") == 3000, timeout_s=120)
        impostor = _impostor(kafka_bootstrap, env["DPSYNTH_GROUP_ID"], topics.input)
        try:
            assert _poll_until_assigned(impostor, 60), "the impostor never got the partition"
            worker.wait_log("joining the group again", timeout_s=60)
        finally:
            impostor.close()  # a static member leaves no LeaveGroup: the worker replaces it
        _send(kafka_bootstrap, topics.input, points[3000:])
        worker.wait_for(lambda m: m.get("dpsynth_t", {}).get("0") == 6000,
                                  timeout_s=120)
        time.sleep(1.0)
        assert worker.metrics()["dpsynth_t"]["0"] == 6000 and worker.alive
    expected = embedded_release_records(points, epsilon=1.0, release_every=1000, max_depth=12,
                                        run_id="test-run", partition=0)
    stats = check_against_embedded(read_topic(kafka_bootstrap, topics.output),
                                   {(0, s): r for s, r in expected.items()}, "test-run")
    assert stats["releases"] == 6


def test_a_worker_fenced_again_and_again_exits_naming_the_setting(
        kafka_bootstrap, tmp_path):
    topics, env, worker = _worker(kafka_bootstrap, tmp_path, "fenced-twice")
    with worker:
        worker.wait_ready(120)
        _send(kafka_bootstrap, topics.input, np.random.default_rng(32).random((1000, 2)))
        worker.wait_for(lambda m: m.get("dpsynth_t", {}).get("0") == 1000, timeout_s=120)
        deadline = time.monotonic() + 90
        while worker.alive and time.monotonic() < deadline:  # a second live "worker"
            impostor = _impostor(kafka_bootstrap, env["DPSYNTH_GROUP_ID"], topics.input)
            try:
                _poll_until_assigned(impostor, 20)
                while worker.alive and _poll_until_assigned(impostor, 1):
                    pass  # holds the partition until the worker fences it back
            finally:
                impostor.close()
        assert worker.wait_exit(30) == EXIT_FATAL, worker.log_tail()
        log = worker.log_path.read_text()
    assert log.count("joining the group again") == REJOINS_PER_WINDOW
    assert "DPSYNTH_GROUP_INSTANCE_ID" in log and f"failed {REJOINS_PER_WINDOW + 1} times" in log


def test_a_session_timeout_the_broker_refuses_ends_the_worker_naming_the_setting(
        kafka_bootstrap, tmp_path):
    """The broker's group.min.session.timeout.ms is 6 s by default: a worker configured with 3 s
    used to retry its JoinGroup for ever while waiting for partitions (found while forcing the
    fencing path of test_cluster.py with a short session)."""
    topics = unique_topics("session-refused")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", tick_seconds=0, session_timeout_s=3)
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        assert worker.wait_exit(60) == EXIT_FATAL, worker.log_tail()
        log = worker.log_path.read_text()
    assert "the broker refuses DPSYNTH_SESSION_TIMEOUT_S=3" in log
    assert TEST_KEY_HEX not in log
