"""The latest view on a real broker: a late subscriber reads one release per partition.

Two runs of the worker, one publishing 10 releases per input partition and one 1,000 (a release
every 10 records, two input partitions), each onto its own topics; the latest view's topic is
created as ``dpsynth topics create`` makes it, except ``segment.ms=1``, so that every
transaction's commit marker closes the segment holding its records and compaction reaches them
(in production ``segment.ms`` bounds how many recent releases are not compacted yet). Once the
log cleaner has run, a plain ``read_committed`` consumer (no dpsynth code) reading the latest
view from its beginning reads exactly the records of each partition's newest release — the same
number of messages after 10 and after 1,000 releases — and they are byte for byte the embedded
engine's last release; the history topic holds every release exactly once.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from dpsynth.client.consumer import ReleaseConsumer, latest_view_topic
from dpsynth.stream.output import latest_key
from dpsynth.stream.topics import latest_view_config
from dpsynth.testing.kafka import (
    WorkerProcess,
    create_topics,
    encode_records,
    produce_messages,
    records_of,
    unique_topics,
    worker_env,
    write_schema,
)
from tests.support.embedded import embedded_release_records
from tests.support.plain_consumer import assert_exactly_once, read_all

pytestmark = pytest.mark.kafka

RELEASE_EVERY = 10
PARTITIONS = 2


def _run_history(bootstrap: str, tmp_path, releases: int) -> tuple[list, dict]:
    """Publish ``releases`` per partition; return the latest view as read once compacted, and
    the expected last release of each partition."""
    topics = unique_topics(f"latest-{releases}")
    latest = latest_view_topic(topics.output)
    create_topics(bootstrap, {topics.input: PARTITIONS, topics.output: PARTITIONS,
                              topics.dead_letter: 1})
    from dpsynth.client.transfer import ensure_topic

    ensure_topic(bootstrap, latest, PARTITIONS,
                 topic_config={**latest_view_config(1, 1_048_588), "segment.ms": "1"})
    rng = np.random.default_rng(releases)
    points = {p: rng.random((releases * RELEASE_EVERY, 2)) for p in range(PARTITIONS)}
    produce_messages(bootstrap, topics.input, [
        (p, encode_records(records_of(points[p][i:i + 5 * RELEASE_EVERY])))
        for i in range(0, releases * RELEASE_EVERY, 5 * RELEASE_EVERY) for p in points])
    env = worker_env(bootstrap, topics, write_schema(tmp_path / f"schema-{releases}.json"),
                     tmp_path / f"data-{releases}", release_every=RELEASE_EVERY,
                     tick_seconds=0, latest_interval_s=0, release_linger_s=0.05)
    with WorkerProcess(env, tmp_path / f"worker-{releases}.log") as worker:
        worker.wait_for(lambda m: all(m.get("dpsynth_releases_total", {}).get(str(p)) == releases
                                      for p in range(PARTITIONS)), timeout_s=180)
        writes = worker.metrics()["dpsynth_latest_view_writes_total"]
    expected = {(p, s): r for p in points for s, r in embedded_release_records(
        points[p], epsilon=1.0, release_every=RELEASE_EVERY, max_depth=12, run_id="test-run",
        partition=p).items()}
    history = read_all(bootstrap, topics.output)
    assert assert_exactly_once(history, expected, "test-run") == PARTITIONS * releases
    last = {p: expected[(p, releases)] for p in points}
    want = sum(len(r) for r in last.values())
    assert sum(writes.values()) > 2 * PARTITIONS or releases < 100  # many versions written
    deadline = time.monotonic() + 180  # the log cleaner runs every few seconds
    while len(view := read_all(bootstrap, latest)) != want:
        assert time.monotonic() < deadline, (
            f"the latest view still holds {len(view)} records, not {want}, after 180 s")
        time.sleep(1.0)
    with ReleaseConsumer(bootstrap, topics.output, latest_view=True) as consumer:
        consumer.read_to_end(timeout_s=60)
        assert consumer.rejected == 0
        assert {p: k.sequence for (_, p), (k, _) in consumer.latest.items()} == {
            p: releases for p in points}
    return view, last


def test_a_late_subscriber_reads_one_release_per_partition_whatever_the_history(
        kafka_bootstrap, tmp_path):
    read = {}
    for releases in (10, 1000):
        view, last = _run_history(kafka_bootstrap, tmp_path, releases)
        for p, records in last.items():  # each partition's newest release, whole, in order
            mine = [r for r in view if r.partition == p % PARTITIONS]
            assert [r.key for r in mine] == [latest_key("test-run", p, i)
                                             for i in range(len(records))]
            assert [r.value for r in mine] == records
        read[releases] = len(view)
    assert read[10] == read[1000] == PARTITIONS * 3  # header, one chunk, end per partition
