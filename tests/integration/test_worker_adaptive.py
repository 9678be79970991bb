"""Issue 8 and 13 in the worker: step blocks under add/remove, steps from tick markers.

The worker (``DPSYNTH_MECHANISM=adaptive``, ``DPSYNTH_NEIGHBOURS=add_remove``) ends a step only
at a tick marker: markers written into the input between the records (as a worker of the run
writes them) and its own timer's (``DPSYNTH_TICK_SECONDS``). It is killed in the middle of a
step, restarted on the same RocksDB directory, and its synthetic topic must hold exactly the
releases of the embedded engine replayed over the input partition as it is on the broker,
markers included (byte-identical; re-produced ones are duplicates). No release carries the
count: the size is noisy, and there is no records-per-step.
"""

from __future__ import annotations

import signal

import numpy as np
import pytest

from dpsynth.release import decode_release
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

PER_MESSAGE = 130
MARKER_AFTER = (4, 5, 13, 30, 31, 50)  # uneven steps, one of them empty
SCHEMA = Schema.from_dict({"version": 1, "columns": [
    {"name": "x", "lower": 0, "upper": 1}, {"name": "y", "lower": 0, "upper": 1}]})


def test_add_remove_worker_survives_a_kill_and_equals_the_embedded_engine(
    kafka_bootstrap, tmp_path
):
    n = 9000
    points = np.clip(np.random.default_rng(21).normal(0.4, 0.2, (n, 2)), 0, 1)
    messages = []
    for k, i in enumerate(range(0, n, PER_MESSAGE)):
        messages.append((0, encode_records(records_of(points[i:i + PER_MESSAGE]))))
        if k in MARKER_AFTER:
            messages.append((0, marker(0, 1000 * (k + 1))))  # old periods: before the timer's
    topics = unique_topics("adaptive")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    produce_messages(kafka_bootstrap, topics.input, messages)
    end = end_offsets(kafka_bootstrap, topics.input)[0]
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", mechanism="adaptive", neighbours="add_remove",
                     tick_seconds=1, batch_max_events=4, release_linger_s=0,
                     group_instance_id="worker-0")
    log = tmp_path / "worker.log"
    crashing = WorkerProcess({**env, "DPSYNTH_CRASH_AT": "mid_tick:4"}, log).start()
    status = crashing.wait_exit(120)
    crashing.stop()
    assert status == -signal.SIGKILL, crashing.log_tail()

    with WorkerProcess(env, log) as worker:
        worker.wait_for(counted_through(n, end), timeout_s=120)
    values = input_values(kafka_bootstrap, topics.input)
    watermark = committed_watermark(tmp_path / "data")

    records = read_topic(kafka_bootstrap, topics.output)
    expected = expected_points_through(values, SCHEMA, watermark + 1, records, epsilon=1.0,
                                       release_every=1000, max_depth=12,
                                       neighbours="add_remove", mechanism="adaptive")
    check_against_embedded(records, expected, "test-run")
    assert len(expected) >= len(MARKER_AFTER) + 1  # the test's markers and the timer's
    for key in sorted(expected):
        release = decode_release(expected[key])
        assert release.metadata["neighbours"] == "add_remove"
        assert release.metadata["schedule"] == "adaptive"
        assert release.metadata["release_every"] is None  # no records per step: P11
        assert release.t == int(release.leaf_counts.sum())  # a noisy size, never the count
