"""Issue 8 in the worker: the adaptive schedule (step blocks, PrivTree) on a real broker.

The worker (``DPSYNTH_SCHEDULE=adaptive``) is killed in the middle of a tick, restarted on the
same RocksDB directory, and its synthetic topic must hold exactly the embedded engine's releases
(byte-identical; re-produced ones are duplicates). Under replacement the steps are
``DPSYNTH_RELEASE_EVERY`` records (the count is public); add/remove is refused in the worker
until steps come from tick markers (tests/unit/test_stream_config.py).
"""

from __future__ import annotations

import signal

import numpy as np
import pytest

from dpsynth.release import decode_release
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
PER_MESSAGE = 130


def test_adaptive_worker_survives_a_kill_and_equals_the_embedded_engine(
    kafka_bootstrap, tmp_path
):
    n = 9000
    points = np.clip(np.random.default_rng(21).normal(0.4, 0.2, (n, 2)), 0, 1)
    messages = [(0, encode_records(records_of(points[i:i + PER_MESSAGE])))
                for i in range(0, n, PER_MESSAGE)]
    topics = unique_topics("adaptive")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    produce_messages(kafka_bootstrap, topics.input, messages)
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", mechanism="adaptive", neighbours="replace",
                     batch_max_events=4, release_linger_s=0, group_instance_id="worker-0")
    log = tmp_path / "worker.log"
    crashing = WorkerProcess({**env, "DPSYNTH_CRASH_AT": "mid_tick:4"}, log).start()
    status = crashing.wait_exit(120)
    crashing.stop()
    assert status == -signal.SIGKILL, crashing.log_tail()

    def finished(m: dict) -> bool:
        return (m.get("dpsynth_t", {}).get("0") == n
                and m.get("dpsynth_watermark", {}).get("0") == len(messages) - 1)

    with WorkerProcess(env, log) as worker:
        worker.wait_for(finished, timeout_s=120)
    expected = {(0, s): r for s, r in embedded_release_records(
        points, epsilon=1.0, release_every=RELEASE_EVERY, max_depth=12, run_id="test-run",
        partition=0, mechanism="adaptive", neighbours="replace").items()}
    records = read_topic(kafka_bootstrap, topics.output)
    stats = check_against_embedded(records, expected, "test-run")
    assert stats["releases"] == n // RELEASE_EVERY
    last = decode_release(expected[(0, n // RELEASE_EVERY)])
    assert last.metadata["neighbours"] == "replace"
    assert last.metadata["schedule"] == "adaptive"
    assert last.t == int(last.leaf_counts.sum()) == n  # t is public under replacement
