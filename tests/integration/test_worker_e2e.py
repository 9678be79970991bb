"""The worker end to end on a real broker: releases byte-identical to the embedded engine's.

Every test runs ``python -m dpsynth worker`` as a subprocess on fresh topics, feeds it
msgpack records and compares the synthetic topic with ``OnlineSynthesizer(..., partition=p)``
fed the same points under the same key (``dpsynth.testing.kafka``). Ticks every 1000 records
only (``DPSYNTH_TICK_SECONDS=0``): markers are tested in test_worker_ticks, _crash, _replay.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from dpsynth.client.consumer import ReleaseConsumer
from dpsynth.keys import NoiseKey
from dpsynth.stream.codecs import dead_letter_digest, decode_dead_letter
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

RELEASE_EVERY = 1000
KEY = NoiseKey.from_hex(TEST_KEY_HEX, "test")  # the workers' key: matches dead letters


def _expected(points: np.ndarray, partition: int = 0, max_depth: int = 12,
              mechanism: str | None = None) -> dict:
    per_sequence = embedded_release_records(
        points, epsilon=1.0, release_every=RELEASE_EVERY, max_depth=max_depth,
        run_id="test-run", partition=partition, mechanism=mechanism,
    )
    return {(partition, s): r for s, r in per_sequence.items()}


def _done(n_records: int, last_offset: int, partition: str = "0"):
    def predicate(m: dict) -> bool:
        return (m.get("dpsynth_t", {}).get(partition) == n_records
                and m.get("dpsynth_watermark", {}).get(partition) == last_offset)
    return predicate


@pytest.mark.slow
def test_1e5_records_in_batches_equal_the_embedded_engine(kafka_bootstrap, tmp_path):
    n, per_message = 100_000, 1000
    points = np.random.default_rng(1).random((n, 2))
    topics = unique_topics("e2e-batch")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", max_depth=20, tick_seconds=0)
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        worker.wait_ready()
        start = time.monotonic()
        produce_messages(kafka_bootstrap, topics.input, (
            (0, encode_records(records_of(points[i:i + per_message])))
            for i in range(0, n, per_message)
        ))
        metrics = worker.wait_for(_done(n, n // per_message - 1), timeout_s=300)
        elapsed = time.monotonic() - start
    latency = (metrics["dpsynth_release_latency_seconds_sum"]["0"]
               / metrics["dpsynth_release_latency_seconds_count"]["0"])
    print(f"\n1e5 records, {per_message}/message: {n / elapsed:,.0f} records/s produce→release, "
          f"mean release latency {latency:.3f} s, "
          f"chunks written/commit {metrics['dpsynth_state_chunks_written_total']['0'] / metrics['dpsynth_state_commits_total']['0']:.1f}"  # noqa: E501
          f" of {metrics['dpsynth_state_chunks']['0']:.0f}")
    stats = check_against_embedded(
        read_topic(kafka_bootstrap, topics.output), _expected(points, max_depth=20), "test-run"
    )
    assert stats["releases"] == n // RELEASE_EVERY
    assert stats["duplicates"] == 0
    assert metrics["dpsynth_releases_total"]["0"] == n // RELEASE_EVERY


def test_one_record_per_message_equals_the_embedded_engine(kafka_bootstrap, tmp_path):
    """Also the other mechanism ("paper"; the other tests use the synthesizer's default)."""
    n = 5000
    points = np.random.default_rng(2).random((n, 2))
    topics = unique_topics("e2e-single")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    produce_messages(kafka_bootstrap, topics.input,
                     ((0, encode_records(r)) for r in records_of(points)))
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", mechanism="paper", tick_seconds=0)
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        start = time.monotonic()
        worker.wait_for(_done(n, n - 1), timeout_s=120)
        elapsed = time.monotonic() - start
    print(f"\n{n} records, 1/message: {n / elapsed:,.0f} records/s (incl. worker start)")
    stats = check_against_embedded(
        read_topic(kafka_bootstrap, topics.output), _expected(points, mechanism="paper"),
        "test-run",
    )
    assert stats["releases"] == n // RELEASE_EVERY
    with ReleaseConsumer(kafka_bootstrap, topics.output, run_id="test-run") as consumer:
        events = list(consumer.releases(idle_s=3))
        assert [e.key.sequence for e in events] == list(range(1, n // RELEASE_EVERY + 1))
        assert consumer.latest_t() == {0: n}
        assert consumer.merge_latest().shape == (n, 2)


def test_bad_input_goes_to_the_dead_letter_topic_and_is_not_counted(kafka_bootstrap, tmp_path):
    rng = np.random.default_rng(3)
    good = rng.random((3000, 2))
    secret = 424242.125  # a value that must never appear in a reason
    bad_messages = [
        (b"\xc1\x00garbage", "not valid msgpack"),
        (encode_records({"x": 0.5}), "field 'y' is missing"),                 # wrong dimension
        (encode_records({"x": float("nan"), "y": 0.1}), "must be finite"),
        (encode_records({"x": float("inf"), "y": 0.1}), "must be finite"),
        (encode_records({"x": "abc", "y": 0.1}), "must be a number"),
        (encode_records(7), "must be a msgpack map"),
        (encode_records([{"x": 0.1, "y": 0.2}, {"x": secret, "y": float("nan")}]),
         "must be finite"),                                                    # 1 of 2 bad
    ]
    messages, valid, expected_reasons = [], [], {}
    chunks = np.array_split(good, 30)
    for i, chunk in enumerate(chunks):
        messages.append(encode_records(records_of(chunk)))
        valid.append(chunk)
        if i < len(bad_messages):
            raw, reason = bad_messages[i]
            expected_reasons[len(messages)] = reason
            messages.append(raw)
            if i == len(bad_messages) - 1:
                valid.append(np.array([[0.1, 0.2]]))  # the good half of the mixed batch
    points = np.vstack(valid)
    topics = unique_topics("badinput")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    produce_messages(kafka_bootstrap, topics.input, ((0, m) for m in messages))
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", tick_seconds=0)
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        metrics = worker.wait_for(_done(len(points), len(messages) - 1), timeout_s=120)
        assert worker.alive
    assert metrics["dpsynth_dead_lettered_messages_total"]["0"] == len(bad_messages)
    dead = [decode_dead_letter(r.value) for r in read_topic(kafka_bootstrap, topics.dead_letter)]
    assert sorted(d["offset"] for d in dead) == sorted(expected_reasons)
    for letter in dead:
        assert expected_reasons[letter["offset"]] in letter["reason"]
        assert letter["hmac_sha256"] == dead_letter_digest(messages[letter["offset"]], KEY)
        assert letter["partition"] == 0 and letter["topic"] == topics.input
        assert str(secret) not in letter["reason"]
    mixed = next(d for d in dead if d["n_records"] == 2)
    assert mixed["rejects"] == [[1, "field 'y' must be finite (NaN and ±inf are rejected)"]]
    assert str(secret) not in worker.log_path.read_text()
    # t excludes the rejected records; releases equal the embedded engine's on the valid ones
    check_against_embedded(read_topic(kafka_bootstrap, topics.output), _expected(points),
                           "test-run")
