"""Replays on a real broker: a recorded raw-events topic gives the same releases again.

- A second run (fresh data directory, new consumer group) over the same raw topic with the same
  key reproduces every release byte for byte, the steps of the first run's tick markers
  included (the markers are in the topic: replays see the same steps, P11).
- A worker that receives a partition without local state while the group's offset is already
  committed (a pod moved to a new volume, a deleted data directory) restores the state from the
  state topic — not by reading the input back from offset 0 — and publishes none of the releases
  again (they are on the topic, published by the transactions that moved the group's offset).
"""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

from dpsynth.schema import Schema
from dpsynth.testing.kafka import (
    WorkerProcess,
    committed_offsets,
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

pytestmark = pytest.mark.kafka

PER_MESSAGE = 100


SCHEMA = Schema.from_dict({"version": 1, "columns": [
    {"name": "x", "lower": 0, "upper": 1}, {"name": "y", "lower": 0, "upper": 1}]})


def _messages(points: np.ndarray, first: int = 0) -> list[tuple[int, bytes]]:
    """Messages of PER_MESSAGE records, a tick marker after every 17th (as the run writes)."""
    out = []
    for k, i in enumerate(range(0, len(points), PER_MESSAGE), start=first):
        out.append((0, encode_records(records_of(points[i:i + PER_MESSAGE]))))
        if k % 17 == 16:
            out.append((0, marker(0, 1000 * (k + 1))))  # old periods: before the timer's
    return out


def _expected(bootstrap: str, topic: str, data_dir, records) -> dict:
    """The embedded engine over the input partition (markers included), as far as published."""
    return expected_points_through(input_values(bootstrap, topic), SCHEMA,
                                   committed_watermark(data_dir) + 1, records, epsilon=1.0,
                                   release_every=1000, max_depth=12)


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
    end = end_offsets(kafka_bootstrap, topics.input)[0]
    schema = write_schema(tmp_path / "schema.json")
    first = worker_env(kafka_bootstrap, topics, schema, tmp_path / "data-1", tick_seconds=1)
    with WorkerProcess(first, tmp_path / "first.log") as worker:
        worker.wait_for(counted_through(len(points), end))
    end = end_offsets(kafka_bootstrap, topics.input)[0]  # now with the first run's markers
    second = worker_env(kafka_bootstrap, topics, schema, tmp_path / "data-2",
                        group_id=f"{topics.input}-replay", output_topic=replay_output,
                        tick_seconds=1)
    with WorkerProcess(second, tmp_path / "second.log") as worker:
        worker.wait_for(counted_through(len(points), end))
    original = [r.value for r in read_topic(kafka_bootstrap, topics.output)]
    replayed = [r.value for r in read_topic(kafka_bootstrap, replay_output)]
    assert replayed == original  # byte-identical, in the same order (markers after the data
    # change nothing under replacement: no record is new)
    records = read_topic(kafka_bootstrap, replay_output)
    expected = _expected(kafka_bootstrap, topics.input, tmp_path / "data-2", records)
    stats = check_against_embedded(records, expected, "test-run")
    assert stats["releases"] > len(points) // 1000  # the markers ended ticks too


def test_partition_without_local_state_is_restored_from_the_state_topic(
    kafka_bootstrap, tmp_path
):
    points = np.random.default_rng(22).random((10_000, 2))
    before, after = _messages(points[:6000]), _messages(points[6000:], first=60)
    topics = unique_topics("replay-lost")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    produce_messages(kafka_bootstrap, topics.input, before)
    end = end_offsets(kafka_bootstrap, topics.input)[0]
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", tick_seconds=1)
    with WorkerProcess(env, tmp_path / "first.log") as worker:
        worker.wait_for(counted_through(6000, end))
        deadline = time.monotonic() + 30  # committed with the releases' transactions
        while committed_offsets(kafka_bootstrap, env["DPSYNTH_GROUP_ID"], topics.input,
                                1)[0] < end:
            assert time.monotonic() < deadline, "group offset not committed"
            time.sleep(0.5)
        committed = committed_offsets(kafka_bootstrap, env["DPSYNTH_GROUP_ID"], topics.input,
                                      1)[0]
    shutil.rmtree(tmp_path / "data")  # the state is lost; the group offset is not
    produce_messages(kafka_bootstrap, topics.input, after)
    end = end_offsets(kafka_bootstrap, topics.input)[0]
    with WorkerProcess(env, tmp_path / "second.log") as worker:
        metrics = worker.wait_for(counted_through(10_000, end))
    assert metrics["dpsynth_state_restores_total"]["0"] == 1
    # the first worker's stop committed its state with its last transaction: nothing to replay
    assert metrics.get("dpsynth_messages_replayed_total", {}).get("0", 0) < committed
    assert "state restored from the state topic" in (tmp_path / "second.log").read_text()
    records = read_topic(kafka_bootstrap, topics.output)
    stats = check_against_embedded(
        records, _expected(kafka_bootstrap, topics.input, tmp_path / "data", records),
        "test-run")
    assert stats["releases"] > 10  # every 1000 records, and at markers
    assert stats["duplicates"] == 0  # the first worker's releases were published once
