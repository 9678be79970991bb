"""Replays on a real broker: a recorded raw-events topic gives the same releases again.

- A second run (fresh data directory, new consumer group) over the same raw topic with the same
  key reproduces every release byte for byte.
- A worker that receives a partition without local state while the group's offset is already
  committed (a pod moved to a new volume, a deleted data directory) rebuilds the state by reading
  the partition back from offset 0: the releases it re-publishes are byte-identical duplicates.
"""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

from dpsynth.testing.kafka import (
    WorkerProcess,
    committed_offsets,
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

PER_MESSAGE = 100


def _messages(points: np.ndarray) -> list[tuple[int, bytes]]:
    return [(0, encode_records(records_of(points[i:i + PER_MESSAGE])))
            for i in range(0, len(points), PER_MESSAGE)]


def _finished(n: int, last_offset: int):
    def predicate(m: dict) -> bool:
        return (m.get("dpsynth_t", {}).get("0") == n
                and m.get("dpsynth_watermark", {}).get("0") == last_offset)
    return predicate


def _expected(points: np.ndarray) -> dict:
    per_sequence = embedded_release_records(
        points, epsilon=1.0, release_every=1000, max_depth=12, run_id="test-run", partition=0,
    )
    return {(0, s): r for s, r in per_sequence.items()}


def test_second_run_with_fresh_state_and_new_group_reproduces_every_release(
    kafka_bootstrap, tmp_path
):
    points = np.random.default_rng(21).random((8000, 2))
    messages = _messages(points)
    topics = unique_topics("replay-run")
    replay_output = f"{topics.output}-again"
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1,
                                    replay_output: 1})
    produce_messages(kafka_bootstrap, topics.input, messages)
    schema = write_schema(tmp_path / "schema.json")
    first = worker_env(kafka_bootstrap, topics, schema, tmp_path / "data-1")
    with WorkerProcess(first, tmp_path / "first.log") as worker:
        worker.wait_for(_finished(len(points), len(messages) - 1))
    second = worker_env(kafka_bootstrap, topics, schema, tmp_path / "data-2",
                        group_id=f"{topics.input}-replay", output_topic=replay_output)
    with WorkerProcess(second, tmp_path / "second.log") as worker:
        worker.wait_for(_finished(len(points), len(messages) - 1))
    original = [r.value for r in read_topic(kafka_bootstrap, topics.output)]
    replayed = [r.value for r in read_topic(kafka_bootstrap, replay_output)]
    assert replayed == original  # byte-identical, in the same order
    check_against_embedded(read_topic(kafka_bootstrap, replay_output), _expected(points),
                           "test-run")


def test_partition_without_local_state_is_rebuilt_by_replaying_its_input(
    kafka_bootstrap, tmp_path
):
    points = np.random.default_rng(22).random((10_000, 2))
    messages = _messages(points)
    before, after = messages[:60], messages[60:]
    topics = unique_topics("replay-lost")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    produce_messages(kafka_bootstrap, topics.input, before)
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data")
    with WorkerProcess(env, tmp_path / "first.log") as worker:
        worker.wait_for(_finished(6000, len(before) - 1))
        deadline = time.monotonic() + 30  # Faust commits acknowledged offsets every second
        while committed_offsets(kafka_bootstrap, env["DPSYNTH_GROUP_ID"], topics.input,
                                1)[0] != len(before):
            assert time.monotonic() < deadline, "group offset not committed"
            time.sleep(0.5)
    shutil.rmtree(tmp_path / "data")  # the state is lost; the group offset (60) is not
    produce_messages(kafka_bootstrap, topics.input, after)
    with WorkerProcess(env, tmp_path / "second.log") as worker:
        metrics = worker.wait_for(_finished(10_000, len(messages) - 1))
    assert metrics["dpsynth_messages_replayed_total"]["0"] == len(before)
    assert "replaying offsets [0, 60)" in (tmp_path / "second.log").read_text()
    stats = check_against_embedded(read_topic(kafka_bootstrap, topics.output),
                                   _expected(points), "test-run")
    assert stats["releases"] == 10
    assert stats["duplicates"] > 0  # releases 1..6 published twice, byte-identical
