"""``DPSYNTH_RELEASE_GROWTH`` on a real broker: the worker's releases are the embedded engine's.

Replacement, a step every 200 records growing with g = 0.25 (steps of 400 records from
t = 1,600, 800 from 3,200 …), tick markers among the records (each ends a step early; the
growth goes on from there): the releases on the topic are byte-identical to the library's over
the same input partition, markers included, and fewer than a step every 200 records would give.
"""

from __future__ import annotations

import numpy as np
import pytest

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

pytestmark = pytest.mark.kafka

SCHEMA = Schema.from_dict({"version": 1, "columns": [
    {"name": "x", "lower": 0, "upper": 1}, {"name": "y", "lower": 0, "upper": 1}]})
EVERY, GROWTH, PER_MESSAGE = 200, 0.25, 50


def test_grown_steps_on_the_worker_equal_the_embedded_engine(kafka_bootstrap, tmp_path) -> None:
    points = np.random.default_rng(33).random((12_000, 2))
    messages = []
    for k, i in enumerate(range(0, len(points), PER_MESSAGE)):
        messages.append((0, encode_records(records_of(points[i:i + PER_MESSAGE]))))
        if k % 37 == 36:
            messages.append((0, marker(0, 1000 * (k + 1))))  # old periods: before the timer's
    topics = unique_topics("growth")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    produce_messages(kafka_bootstrap, topics.input, messages)
    end = end_offsets(kafka_bootstrap, topics.input)[0]
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", release_every=EVERY, release_growth=GROWTH,
                     tick_seconds=1)
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        worker.wait_for(counted_through(len(points), end))
    records = read_topic(kafka_bootstrap, topics.output)
    expected = expected_points_through(
        input_values(kafka_bootstrap, topics.input), SCHEMA,
        committed_watermark(tmp_path / "data") + 1, records, epsilon=1.0, release_every=EVERY,
        max_depth=12, release_growth=GROWTH)
    stats = check_against_embedded(records, expected, "test-run")
    assert 0 < stats["releases"] < len(points) // EVERY // 2  # the steps grew
