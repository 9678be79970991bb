"""The test broker is a real Kafka: produce/consume, transactions, topics with partitions.

Runs against ``kafka_bootstrap`` (conftest): the local single-node KRaft broker of
``deploy/kafka-local.sh`` here. The transaction test is the one a protocol look-alike fails
(Tansu hands aborted records to read_committed consumers): on real Kafka they stay invisible.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from dpsynth.testing import broker
from dpsynth.testing.kafka import create_topics

ck = pytest.importorskip("confluent_kafka")
ck_admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.kafka

TIMEOUT_S = 60.0


def _name(kind: str) -> str:
    return f"dpsynth-it-{kind}-{uuid.uuid4().hex[:10]}"


def _consumer(bootstrap: str, **extra: str) -> Any:
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": _name("group"),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
        **extra,
    }
    return ck.Consumer(config)


def _consume(consumer: Any, *, until: Callable[[list[bytes]], bool]) -> list[bytes]:
    """Poll until ``until(values)`` holds; fail after TIMEOUT_S."""
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    while not until(values):
        assert time.monotonic() < deadline, f"timed out; got {values!r}"
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"consumer error: {msg.error()}")
        values.append(msg.value())
    return values


def test_bootstrap_is_a_live_kraft_broker(kafka_bootstrap: str) -> None:
    admin = ck_admin.AdminClient({"bootstrap.servers": kafka_bootstrap})
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    assert len(metadata.brokers) == 1
    cluster = admin.describe_cluster().result(timeout=TIMEOUT_S)
    assert cluster.cluster_id
    assert len(cluster.nodes) == 1


def test_produce_and_consume_on_an_auto_created_topic(kafka_bootstrap: str) -> None:
    topic = _name("plain")  # never created explicitly: auto.create.topics.enable=true
    producer = ck.Producer(
        {"bootstrap.servers": kafka_bootstrap, "acks": "all", "enable.idempotence": True}
    )
    sent = [f"m-{i}".encode() for i in range(20)]
    for i, value in enumerate(sent):
        producer.produce(topic, key=str(i % 3).encode(), value=value)
    assert producer.flush(TIMEOUT_S) == 0

    consumer = _consumer(kafka_bootstrap)
    try:
        consumer.subscribe([topic])
        got = _consume(consumer, until=lambda vs: len(vs) >= len(sent))
    finally:
        consumer.close()
    assert got == sent  # num.partitions=1: one partition, so order is kept

    metadata = ck_admin.AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(
        topic, timeout=TIMEOUT_S
    )
    assert len(metadata.topics[topic].partitions) == 1


def test_read_committed_sees_committed_but_not_aborted(kafka_bootstrap: str) -> None:
    topic = _name("txn")
    create_topics(kafka_bootstrap, {topic: 1})
    producer = ck.Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": _name("txid")}
    )
    producer.init_transactions(TIMEOUT_S)

    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"committed-{i}".encode())
    producer.commit_transaction(TIMEOUT_S)

    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, value=f"aborted-{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0  # the aborted records really reach the log
    producer.abort_transaction(TIMEOUT_S)

    producer.begin_transaction()
    producer.produce(topic, value=b"committed-last")
    producer.commit_transaction(TIMEOUT_S)

    committed = _consumer(kafka_bootstrap, **{"isolation.level": "read_committed"})
    try:
        committed.subscribe([topic])
        seen = _consume(committed, until=lambda vs: b"committed-last" in vs)
    finally:
        committed.close()
    assert seen == [b"committed-0", b"committed-1", b"committed-2", b"committed-last"]

    uncommitted = _consumer(kafka_bootstrap, **{"isolation.level": "read_uncommitted"})
    try:
        uncommitted.subscribe([topic])
        everything = _consume(uncommitted, until=lambda vs: b"committed-last" in vs)
    finally:
        uncommitted.close()
    assert everything == [
        b"committed-0",
        b"committed-1",
        b"committed-2",
        b"aborted-0",
        b"aborted-1",
        b"committed-last",
    ]


def test_admin_creates_a_topic_with_two_partitions(kafka_bootstrap: str) -> None:
    topic = _name("two")
    create_topics(kafka_bootstrap, {topic: 2})
    admin = ck_admin.AdminClient({"bootstrap.servers": kafka_bootstrap})
    metadata = admin.list_topics(topic, timeout=TIMEOUT_S)
    assert sorted(metadata.topics[topic].partitions) == [0, 1]

    duplicate = admin.create_topics([ck_admin.NewTopic(topic, 2, 1)])[topic]
    with pytest.raises(ck.KafkaException) as info:
        duplicate.result(timeout=TIMEOUT_S)
    assert info.value.args[0].code() == ck.KafkaError.TOPIC_ALREADY_EXISTS

    producer = ck.Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all"})
    for partition in (0, 1):
        producer.produce(topic, value=f"p{partition}".encode(), partition=partition)
    assert producer.flush(TIMEOUT_S) == 0
    for partition in (0, 1):
        consumer = _consumer(kafka_bootstrap)
        try:
            consumer.assign([ck.TopicPartition(topic, partition, 0)])
            got = _consume(consumer, until=lambda vs: len(vs) >= 1)
        finally:
            consumer.close()
        assert got == [f"p{partition}".encode()]


def test_environment_broker_wins_and_is_never_stopped(
    monkeypatch: pytest.MonkeyPatch, kafka_bootstrap: str
) -> None:
    monkeypatch.setenv(broker.ENV_BOOTSTRAP, kafka_bootstrap)
    assert broker.bootstrap_servers() == kafka_bootstrap
    handle = broker.acquire_broker()
    assert (handle.kind, handle.started_here) == ("external", False)
    broker.release_broker(handle)  # a no-op: the broker still answers
    broker.wait_for_broker(kafka_bootstrap, timeout=TIMEOUT_S)


def test_the_launcher_starts_a_broker_on_the_port_it_is_given(tmp_path):
    """DPSYNTH_KAFKA_PORT (issue 46): a second broker, in a run dir of its own, on a set port."""
    import os
    import shutil
    import socket
    import subprocess
    import sys

    from dpsynth.testing.broker import missing_prerequisites, script_path

    if missing_prerequisites():
        pytest.skip(f"kafka-local.sh cannot run here: {missing_prerequisites()}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "DPSYNTH_KAFKA_DIR": str(tmp_path / "kafka"),
           "DPSYNTH_KAFKA_PORT": str(port), "DPSYNTH_PYTHON": sys.executable}
    env.pop("DPSYNTH_KAFKA_CONTROLLER_PORT", None)
    env.pop("DPSYNTH_KAFKA_NODES", None)
    argv = [shutil.which("bash") or "/bin/bash", str(script_path())]
    try:
        start = subprocess.run(  # noqa: S603 - the packaged script, fixed arguments
            [*argv, "start"], env=env, capture_output=True, text=True, timeout=300,
            check=False)
        assert start.returncode == 0, start.stderr[-2000:]
        assert start.stdout.strip() == f"KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:{port}"
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        subprocess.run([*argv, "stop"], env=env, capture_output=True,  # noqa: S603
                       timeout=120, check=False)
