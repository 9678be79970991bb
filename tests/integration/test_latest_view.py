"""The latest view on a real broker: a late subscriber reads one release per partition.

One worker, two input partitions of very different histories: 10 releases on partition 0 and
1,000 on partition 1 (a release every 10 records). The latest view's topic is created as
``dpsynth topics create`` makes it, except ``segment.ms=1``, so that every transaction's commit
marker closes the segment holding its records and compaction reaches them (in production
``segment.ms`` bounds how many recent releases are not compacted yet). Once the log cleaner has
run, a plain ``read_committed`` consumer (no dpsynth code) reading the latest view from its
beginning reads exactly the records of each partition's newest release — the same number of
messages for the partition with 10 releases of history as for the one with 1,000 — byte for byte
the embedded engine's last release; the history topic holds every release exactly once; the
consumer library reads the view too.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from dpsynth.client.consumer import ReleaseConsumer, latest_view_topic
from dpsynth.client.transfer import ensure_topic
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
HISTORY = {0: 10, 1: 1000}  # input partition → releases


def test_a_late_subscriber_reads_one_release_per_partition_whatever_the_history(
        kafka_bootstrap, tmp_path):
    topics = unique_topics("latest")
    latest = latest_view_topic(topics.output)
    create_topics(kafka_bootstrap, {topics.input: 2, topics.output: 2, topics.dead_letter: 1})
    ensure_topic(kafka_bootstrap, latest, 2,
                 topic_config={**latest_view_config(1, 1_048_588), "segment.ms": "1"})
    rng = np.random.default_rng(28)
    points = {p: rng.random((n * RELEASE_EVERY, 2)) for p, n in HISTORY.items()}
    produce_messages(kafka_bootstrap, topics.input, [
        (p, encode_records(records_of(points[p][i:i + 5 * RELEASE_EVERY])))
        for p in points for i in range(0, len(points[p]), 5 * RELEASE_EVERY)])
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data", release_every=RELEASE_EVERY, tick_seconds=0,
                     latest_interval_s=0, release_linger_s=0,
                     batch_max_events=10)  # a transaction per 10 messages: many versions
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        metrics = worker.wait_for(lambda m: all(
            m.get("dpsynth_releases_total", {}).get(str(p)) == n for p, n in HISTORY.items()),
            timeout_s=180)
    assert metrics["dpsynth_latest_view_writes_total"]["1"] >= 10  # many versions written
    expected = {(p, s): r for p in points for s, r in embedded_release_records(
        points[p], epsilon=1.0, release_every=RELEASE_EVERY, max_depth=12, run_id="test-run",
        partition=p).items()}
    history = read_all(kafka_bootstrap, topics.output)
    assert assert_exactly_once(history, expected, "test-run") == sum(HISTORY.values())
    last = {p: expected[(p, n)] for p, n in HISTORY.items()}
    deadline = time.monotonic() + 180  # the log cleaner looks for work every few seconds
    while len(view := read_all(kafka_bootstrap, latest)) != sum(map(len, last.values())):
        assert time.monotonic() < deadline, (
            f"the latest view still holds {len(view)} records after 180 s")
        time.sleep(1.0)
    read = {}
    for p, records in last.items():  # each partition's newest release, whole, in order
        mine = [r for r in view if r.partition == p]
        assert [r.key for r in mine] == [latest_key("test-run", p, i) for i in range(len(records))]
        assert [r.value for r in mine] == records
        read[p] = len(mine)
    assert read[0] == read[1] == 3  # header, one chunk, end: 10 releases or 1,000 behind
    with ReleaseConsumer(kafka_bootstrap, topics.output, latest_view=True) as consumer:
        consumer.read_to_end(timeout_s=60)
        assert consumer.rejected == 0 and consumer.tracker.records == 6
        assert {p: k.sequence for (_, p), (k, _) in consumer.latest.items()} == HISTORY
