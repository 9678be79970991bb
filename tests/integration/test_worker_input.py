"""What the worker reads, on a real broker: poison pills of any size, and aborted transactions.

Issue 15: a message of 1 MB or more that had to be dead-lettered stopped its partition for good
(the dead letter held the whole message and broke the producer's size limit). Dead letters are
now bounded; here 1, 10 and 50 MB messages (the input topic's ``max.message.bytes`` raised to
allow them) and garbage of every kind sit between valid records: every bad message gets one
dead letter of bounded size, every valid record is counted once, and the partition moves on.
The input is read ``read_committed``: records of an aborted transaction are never counted, by
the worker nor by its replay reader, and the releases equal the embedded engine's over the
committed records alone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path

import msgpack
import numpy as np
import pytest

from dpsynth.keys import NoiseKey
from dpsynth.stream.codecs import dead_letter_digest, decode_dead_letter
from dpsynth.testing.kafka import (
    TEST_KEY_HEX,
    Topics,
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

MB = 2**20
LARGE = 60 * MB  # the input topic's max.message.bytes in the large-message test


def _garbage() -> list[tuple[str, bytes | None]]:
    """(kind, value) of every sort of bad message the worker must dead-letter and survive."""
    rng = np.random.default_rng(7)  # noqa: TID251 - test input bytes, not noise
    deep = b"\x91" * 200_000 + b"\xc0"  # [[[[…nil…]]]] 200 000 levels deep
    return [
        ("empty value", b""),
        ("tombstone", None),
        ("not msgpack", b"\xc1\xc1\xc1"),
        ("random bytes", rng.bytes(4096)),
        ("truncated msgpack", encode_records({"x": 0.5, "y": 0.5})[:-3]),
        ("an integer", msgpack.packb(7)),
        ("a string", msgpack.packb("x=0.5,y=0.5")),
        ("nil", msgpack.packb(None)),
        ("binary", msgpack.packb(b"\x00" * 100, use_bin_type=True)),
        ("an ext type", msgpack.packb(msgpack.ExtType(5, b"abc"))),
        ("empty map", encode_records({})),
        ("wrong dimension", encode_records({"x": 0.5})),
        ("string value", encode_records({"x": "0.5", "y": 0.5})),
        ("boolean value", encode_records({"x": True, "y": 0.5})),
        ("nested value", encode_records({"x": {"v": [1, 2, 3]}, "y": 0.5})),
        ("list value", encode_records({"x": [0.5], "y": 0.5})),
        ("NaN", encode_records({"x": float("nan"), "y": 0.5})),
        ("inf", encode_records({"x": float("inf"), "y": 0.5})),
        ("-inf", encode_records({"x": 0.5, "y": float("-inf")})),
        ("array of non-maps", encode_records([1, "a", None, [2]])),
        ("deep nesting", deep),
        ("wide nesting", encode_records({"x": {str(i): list(range(50)) for i in range(5_000)},
                                         "y": 0.5})),
        ("100k empty maps", encode_records([{}] * 100_000)),
    ]


def _read_through(bootstrap: str, topics: Topics, tmp_path: Path, last: int) -> dict:
    """Run a worker until its committed watermark is ``last``; its final metrics."""
    env = worker_env(bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", tick_seconds=0)
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        metrics = worker.wait_for(
            lambda m: m.get("dpsynth_watermark", {}).get("0") == last, timeout_s=300)
        assert worker.alive
    return metrics


def _check_letters(records: list, values: dict[int, bytes | None], topic: str) -> None:
    """Each letter names its message by the keyed digest the operator recomputes with the
    run's key, and holds no unsalted SHA-256 of it (issue 44)."""
    key = NoiseKey.from_hex(TEST_KEY_HEX, "test")
    for record in records:
        letter = decode_dead_letter(record.value)
        raw = values[letter["offset"]]
        assert letter["topic"] == topic and letter["partition"] == 0
        assert letter["length"] == (None if raw is None else len(raw))
        assert letter["key_fingerprint"] == key.fingerprint
        if raw is not None:
            assert letter["hmac_sha256"] == dead_letter_digest(raw, key)
            plain = hashlib.sha256(raw)
            assert plain.hexdigest().encode() not in record.value
            assert plain.digest() not in record.value
        assert letter["prefix"] in (None, b"")  # the default: no payload bytes


@pytest.mark.slow
def test_garbage_of_every_kind_is_dead_lettered_and_the_partition_moves_on(
        kafka_bootstrap, tmp_path):
    good = np.random.default_rng(1).random((2500, 2))
    chunks = np.array_split(good, 25)
    garbage = _garbage()
    values: list[bytes | None] = []
    bad_offsets: dict[int, str] = {}
    for i, chunk in enumerate(chunks):
        values.append(encode_records(records_of(chunk)))
        if i < len(garbage):
            bad_offsets[len(values)] = garbage[i][0]
            values.append(garbage[i][1])
    topics = unique_topics("garbage")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    produce_messages(kafka_bootstrap, topics.input, ((0, v) for v in values))
    metrics = _read_through(kafka_bootstrap, topics, tmp_path, len(values) - 1)
    assert metrics["dpsynth_t"]["0"] == len(good)
    assert metrics["dpsynth_dead_lettered_messages_total"]["0"] == len(garbage)
    records = read_topic(kafka_bootstrap, topics.dead_letter)
    dead = [decode_dead_letter(r.value) for r in records]
    by_offset = {d["offset"]: d for d in dead}
    assert sorted(by_offset) == sorted(bad_offsets), "one dead letter per bad message"
    _check_letters(records, dict(enumerate(values)), topics.input)
    assert all(len(r.value) < 70_000 for r in records)
    assert by_offset[min(bad_offsets)]["reason"].startswith("message is not valid msgpack")
    expected = embedded_release_records(good, epsilon=1.0, release_every=1000, max_depth=12,
                                        run_id="test-run", partition=0)
    check_against_embedded(read_topic(kafka_bootstrap, topics.output),
                           {(0, s): r for s, r in expected.items()}, "test-run")


def _big_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, 1, config={
        "max.message.bytes": str(LARGE)})])
    futures[topic].result(30)


def _produce_large(bootstrap: str, topic: str, values: list[bytes]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "message.max.bytes": LARGE + MB, "linger.ms": 0})
    errors: list[str] = []
    for value in values:
        producer.produce(topic, value, partition=0,
                         on_delivery=lambda err, msg: err and errors.append(str(err)))
        producer.flush(120)
    assert not errors, errors


@pytest.mark.slow
def test_1_10_and_50_mb_messages_are_dead_lettered_and_the_partition_moves_on(
        kafka_bootstrap, tmp_path):
    good = np.random.default_rng(2).random((1500, 2))
    rng = np.random.default_rng(3)  # noqa: TID251 - test input bytes, not noise
    one_mb = encode_records([{"x": "a string, not a number", "y": 0.5}] * (MB // 30))
    large = [
        one_mb,                                                         # ~1 MB of bad records
        rng.bytes(10 * MB),                                             # 10 MB, not msgpack
        msgpack.packb(b"\x00" * (50 * MB), use_bin_type=True),          # 50 MB, over the limit
    ]
    assert len(one_mb) > MB
    values = [encode_records(records_of(good[:500])), large[0],
              encode_records(records_of(good[500:1000])), large[1], large[2],
              encode_records(records_of(good[1000:]))]
    topics = unique_topics("large")
    _big_topic(kafka_bootstrap, topics.input)
    create_topics(kafka_bootstrap, {topics.output: 1, topics.dead_letter: 1})
    _produce_large(kafka_bootstrap, topics.input, values)
    metrics = _read_through(kafka_bootstrap, topics, tmp_path, len(values) - 1)
    assert metrics["dpsynth_t"]["0"] == len(good)
    records = read_topic(kafka_bootstrap, topics.dead_letter)
    assert all(len(r.value) < 70_000 for r in records)
    dead = [decode_dead_letter(r.value) for r in records]
    assert sorted(d["offset"] for d in dead) == [1, 3, 4]
    _check_letters(records, dict(enumerate(values)), topics.input)
    by_offset = {d["offset"]: d for d in dead}
    assert by_offset[1]["n_rejects"] == MB // 30 and len(by_offset[1]["rejects"]) == 100
    assert "larger than" in by_offset[4]["reason"]


def _transactional_produce(bootstrap: str, topic: str, values: list[bytes], *,
                           abort: bool) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": f"test-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=0)
    producer.flush(30)
    if abort:
        producer.abort_transaction(30)
    else:
        producer.commit_transaction(30)


@pytest.mark.slow
def test_records_of_an_aborted_transaction_are_never_counted(kafka_bootstrap, tmp_path):
    """The worker and its replay reader skip an aborted transaction's records."""
    rng = np.random.default_rng(4)
    committed = rng.random((3000, 2))
    aborted = rng.random((2000, 2))
    msg = lambda pts: encode_records(records_of(pts))  # noqa: E731
    topics = unique_topics("aborted")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    produce_messages(kafka_bootstrap, topics.input, [(0, msg(committed[:1000]))])
    _transactional_produce(kafka_bootstrap, topics.input,
                           [msg(aborted[:1000]), msg(aborted[1000:])], abort=True)
    _transactional_produce(kafka_bootstrap, topics.input, [msg(committed[1000:2000])],
                           abort=False)
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", tick_seconds=0, changelog="false")  # replay, not restore
    expected = embedded_release_records(committed, epsilon=1.0, release_every=1000,
                                        max_depth=12, run_id="test-run", partition=0)
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        worker.wait_for(lambda m: m.get("dpsynth_t", {}).get("0") == 2000
                        and m.get("dpsynth_releases_total", {}).get("0") == 2, timeout_s=120)
    # the state is lost: the restarted worker replays the input from offset 0 (replay reader)
    shutil.rmtree(tmp_path / "data" / "state")
    produce_messages(kafka_bootstrap, topics.input, [(0, msg(committed[2000:]))])
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        metrics = worker.wait_for(lambda m: m.get("dpsynth_releases_total", {}).get("0") == 1,
                                  timeout_s=120)
        assert metrics["dpsynth_t"]["0"] == 3000
        assert metrics["dpsynth_messages_replayed_total"]["0"] >= 2
        # the replay's releases were published before the state was lost: not again
        assert metrics["dpsynth_releases_replayed_total"]["0"] == 2
    stats = check_against_embedded(read_topic(kafka_bootstrap, topics.output),
                                   {(0, s): r for s, r in expected.items()}, "test-run")
    assert stats["releases"] == 3
    assert os.path.getsize(tmp_path / "worker.log") > 0
