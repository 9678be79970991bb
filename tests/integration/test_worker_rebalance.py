"""Two partitions, two workers, rebalances: every partition's releases equal its embedded run.

Worker A starts alone and owns both input partitions; worker B joins (one partition moves to B,
which has no local state for it and restores it from the state topic); later B stops and A takes
the partition back with its own older state (it replays from its stale watermark); last, A is
killed (SIGKILL) while records arrive and restarts. Records arrive in every phase. Each
partition's releases must equal ``OnlineSynthesizer(..., partition=p)`` on that partition's
points, and a plain ``read_committed`` consumer (no dpsynth code) must see each of them exactly
once, complete and in order: the moves publish nothing twice. The synthetic topic has three
partitions, more than the input: one consumer of all of them, reading from the start, receives
each input partition's releases in sequence order (issue 46; they all sit on output partition
``p mod 3``).
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.client.consumer import ReleaseConsumer
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
from tests.support.plain_consumer import (
    assert_arrival_order,
    assert_exactly_once,
    read_all,
    read_arrival_order,
)

pytestmark = pytest.mark.kafka

PER_MESSAGE = 100


def _produce(bootstrap: str, topic: str, points: dict[int, np.ndarray], start: int, end: int):
    produce_messages(bootstrap, topic, [
        (p, encode_records(records_of(points[p][i:i + PER_MESSAGE])))
        for p in (0, 1) for i in range(start, end, PER_MESSAGE)
    ])


def _all_done(workers: list[WorkerProcess], n: int):
    """Both partitions at t = n with every message committed, on whichever worker owns them."""
    def done() -> bool:
        best: dict[str, tuple[float, float]] = {}
        for w in workers:
            if not w.alive:
                continue
            m = w.metrics()
            for p, t in m.get("dpsynth_t", {}).items():
                watermark = m.get("dpsynth_watermark", {}).get(p, -1)
                best[p] = max(best.get(p, (0, -1)), (t, watermark))
        return all(best.get(p) == (n, n // PER_MESSAGE - 1) for p in ("0", "1"))
    return done


def _wait(predicate, workers: list[WorkerProcess], timeout_s: float = 180) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            tails = "\n----\n".join(w.log_tail(25) for w in workers)
            raise TimeoutError(f"partitions did not finish:\n{tails}")
        time.sleep(0.3)


def test_two_workers_and_rebalances_keep_every_partition_equal_to_its_embedded_run(
    kafka_bootstrap, tmp_path
):
    rng = np.random.default_rng(31)
    points = {0: rng.random((16_000, 2)), 1: rng.random((16_000, 2)) ** 2}
    topics = unique_topics("rebalance")
    create_topics(kafka_bootstrap, {topics.input: 2, topics.output: 3, topics.dead_letter: 1})
    schema = write_schema(tmp_path / "schema.json")
    # ticks every 1000 records only (no markers): the moves, not time, are under test here
    env_a = worker_env(kafka_bootstrap, topics, schema, tmp_path / "data-a", tick_seconds=0)
    env_b = worker_env(kafka_bootstrap, topics, schema, tmp_path / "data-b", tick_seconds=0)
    a = WorkerProcess(env_a, tmp_path / "a.log").start()
    b = WorkerProcess(env_b, tmp_path / "b.log")
    try:
        _produce(kafka_bootstrap, topics.input, points, 0, 6000)
        _wait(_all_done([a], 6000), [a])

        b.start()  # B joins: one partition moves to B, which has no state for it
        # joined: the group gave B one partition (its processor exports t at once)
        b.wait_for(lambda m: len(m.get("dpsynth_t", {})) == 1, timeout_s=120)
        _produce(kafka_bootstrap, topics.input, points, 6000, 10_000)
        _wait(_all_done([a, b], 10_000), [a, b])
        moved = next(iter(b.metrics()["dpsynth_t"]))
        assert "state restored from the state topic" in b.log_path.read_text()
        assert "replaying offsets [0, " not in b.log_path.read_text()

        b.stop()  # B leaves: A takes the partition back, its own state for it is stale
        _produce(kafka_bootstrap, topics.input, points, 10_000, 13_000)
        _wait(_all_done([a], 13_000), [a])
        assert f"partition {moved}: the first input offset delivered" in a.log_path.read_text()

        _produce(kafka_bootstrap, topics.input, points, 13_000, 16_000)
        a.wait_for(lambda m: min(m.get("dpsynth_t", {"0": 0}).values()) >= 14_000)
        a.kill()  # kill -9 mid-stream, then a restart on the same data directory
        a.stop()
        a = WorkerProcess(env_a, tmp_path / "a.log").start()
        _wait(_all_done([a], 16_000), [a])
    finally:
        a.stop()
        b.stop()

    expected = {}
    for p in (0, 1):
        per_sequence = embedded_release_records(
            points[p], epsilon=1.0, release_every=1000, max_depth=12, run_id="test-run",
            partition=p,
        )
        expected.update({(p, s): r for s, r in per_sequence.items()})
    stats = check_against_embedded(read_topic(kafka_bootstrap, topics.output), expected,
                                   "test-run")
    assert stats["releases"] == 32 and stats["duplicates"] == 0
    assert assert_exactly_once(read_all(kafka_bootstrap, topics.output), expected,
                               "test-run") == 32
    assert_arrival_order(read_arrival_order(kafka_bootstrap, topics.output),
                         {("test-run", 0): 16, ("test-run", 1): 16})
    with ReleaseConsumer(kafka_bootstrap, topics.output, run_id="test-run") as consumer:
        events = list(consumer.releases(idle_s=3))
        assert len(events) == 32
        assert consumer.latest_t() == {0: 16_000, 1: 16_000}
        assert consumer.merge_latest().shape == (32_000, 2)
