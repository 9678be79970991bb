"""A three-node KRaft cluster on loopback: the leader of the input or output partition is killed
mid-stream (issue 15).

The cluster comes from the project's own script (``DPSYNTH_KAFKA_NODES=3 kafka-local.sh``,
:class:`dpsynth.testing.cluster.LocalCluster`); the topics from ``dpsynth topics create``
(replication factor 3, ``min.insync.replicas=2``); the test's producer and the worker's release
producer use ``acks=all`` (idempotent). While records flow, the node leading the input
partition (or the output partition) gets SIGKILL and is restarted a few seconds later. Checked:
t equals the number of records sent (none lost, none counted twice); every record on the
synthetic topic is byte-identical to the embedded engine's; a plain ``read_committed`` consumer
(no dpsynth code) sees every release exactly once, complete and in order (the release
transactions and the transaction state log survive the loss of one broker of three), and so
does the consumer library.

``DPSYNTH_TEST_CLUSTER_DIR`` points the tests at a cluster already started from that run
directory (left running); otherwise one is started in a temporary directory and stopped.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpsynth.cli import main
from dpsynth.client.consumer import ReleaseConsumer
from dpsynth.testing.broker import missing_prerequisites
from dpsynth.testing.cluster import LocalCluster
from dpsynth.testing.kafka import (
    WorkerProcess,
    encode_records,
    read_topic,
    records_of,
    unique_topics,
    worker_env,
    write_schema,
)
from tests.support.embedded import check_against_embedded, embedded_release_records
from tests.support.plain_consumer import assert_exactly_once, read_all

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

RECORDS = 24_000
PER_MESSAGE = 40


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    existing = os.environ.get("DPSYNTH_TEST_CLUSTER_DIR", "").strip()
    if not existing and (missing_prerequisites() or shutil.which("mvn") is None):
        pytest.skip(f"no local cluster: {missing_prerequisites() or ['mvn']}")
    handle = LocalCluster(Path(existing) if existing else tmp_path_factory.mktemp("cluster"))
    handle.start()
    try:
        yield handle
    finally:
        if not existing:
            handle.stop()


class Feeder:
    """One acks=all idempotent producer sending ``points`` in order, a message per 10 ms."""

    def __init__(self, bootstrap: str, topic: str, points: np.ndarray) -> None:
        from confluent_kafka import Producer

        self.topic, self.points = topic, points
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "acks": "all", "linger.ms": 5})
        self.errors: list[str] = []
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for i in range(0, len(self.points), PER_MESSAGE):
            value = encode_records(records_of(self.points[i:i + PER_MESSAGE]))
            self.producer.produce(self.topic, value, partition=0, on_delivery=self._delivered)
            self.producer.poll(0)
            self.sent = min(i + PER_MESSAGE, len(self.points))
            time.sleep(0.01)
        if self.producer.flush(300):
            self.errors.append("records still undelivered after 300 s")

    def _delivered(self, err: object, msg: object) -> None:
        if err is not None:
            self.errors.append(str(err))


@pytest.mark.parametrize("victim", ["input", "output"])
def test_killing_a_partition_leader_mid_stream_loses_and_repeats_nothing(
        cluster, tmp_path, victim):
    topics = unique_topics(f"cluster-{victim}")
    cluster.wait_for_brokers()  # every node sees three brokers: replication 3
    created = CliRunner().invoke(main, [
        "topics", "create", "--bootstrap", cluster.bootstrap, "--input-topic", topics.input,
        "--output-topic", topics.output, "--dead-letter-topic", topics.dead_letter])
    assert created.exit_code == 0, created.output
    assert "replication 3" in created.output and "min.insync.replicas=2" in created.output
    points = np.random.default_rng(21 if victim == "input" else 22).random((RECORDS, 2))
    env = worker_env(cluster.bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", tick_seconds=0)
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        worker.wait_ready(120)
        feeder = Feeder(cluster.bootstrap, topics.input, points)
        feeder.thread.start()
        worker.wait_for(lambda m: m.get("dpsynth_releases_total", {}).get("0", 0) >= 2,
                        timeout_s=120)
        node = cluster.leader(topics.input if victim == "input" else topics.output, 0)
        cluster.kill(node)
        killed_at = feeder.sent
        time.sleep(8.0)  # the controller fences the node (6 s) and moves its leaderships
        cluster.restart(node)
        feeder.thread.join(400)
        assert not feeder.errors, feeder.errors[:3]
        assert killed_at < RECORDS, "the kill came after the last record"
        worker.wait_for(lambda m: m.get("dpsynth_t", {}).get("0") == RECORDS,
                                  timeout_s=300)
        time.sleep(1.0)  # nothing more arrives: t stays at the records sent
        assert worker.metrics()["dpsynth_t"]["0"] == RECORDS
        assert worker.alive
    expected = {(0, s): r for s, r in embedded_release_records(
        points, epsilon=1.0, release_every=1000, max_depth=12, run_id="test-run",
        partition=0).items()}
    stats = check_against_embedded(read_topic(cluster.bootstrap, topics.output, timeout_s=60),
                                   expected, "test-run")
    assert stats["duplicates"] == 0
    assert assert_exactly_once(read_all(cluster.bootstrap, topics.output), expected,
                               "test-run") == RECORDS // 1000
    # (not dpsynth_releases_total: a worker fenced while the coordinator moved joins again,
    # and a partition's series restart when it is assigned again)
    assert stats["releases"] == RECORDS // 1000
    with ReleaseConsumer(cluster.bootstrap, topics.output, run_id="test-run") as consumer:
        events = list(consumer.releases(idle_s=3))
    assert sorted(e.key.sequence for e in events) == list(range(1, RECORDS // 1000 + 1))
    print(f"\n{victim} leader (node {node}) killed after {killed_at} records, restarted 8 s "
          f"later: t = {RECORDS}, {stats['releases']} releases, {stats['duplicates']} duplicate "
          "records on the topic, each release once through the consumer library")
