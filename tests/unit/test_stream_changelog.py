"""The state topic without a broker: deltas in the release transactions, restores from them.

The in-memory broker (tests/support/embedded.py) keeps the transactions' records; a worker
"without its disk" restores a partition from the state topic's records — as read, or as
compaction leaves them (the newest value per key) — and continues exactly as an uninterrupted
run, replaying only the input after the last state commit.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

pytest.importorskip("rocksdict")

from dpsynth.stream.changelog import restore_from  # noqa: E402
from dpsynth.stream.crash import CrashPoints  # noqa: E402
from dpsynth.stream.persist import PartitionState  # noqa: E402
from dpsynth.stream.processor import InputMessage, PartitionProcessor  # noqa: E402
from dpsynth.stream.store import PartitionStore  # noqa: E402
from dpsynth.testing.kafka import encode_records, records_of  # noqa: E402
from tests.support.embedded import (  # noqa: E402
    MemorySink,
    check_against_embedded,
    embedded_release_records,
)
from tests.support.processor import point_config  # noqa: E402

RELEASE_EVERY = 500
STATE = "state-topic"


class Crash(Exception):
    """Stands in for SIGKILL."""


def _messages(points):
    return [InputMessage(offset=k, value=encode_records(records_of(points[i:i + 100])))
            for k, i in enumerate(range(0, len(points), 100))]


def _expected(points):
    return {(0, s): r for s, r in embedded_release_records(
        points, epsilon=1.0, release_every=RELEASE_EVERY, max_depth=10, run_id="test-run",
        partition=0).items()}


def _topic(sink, compacted=False):
    """The state topic's (key, value) records in order; ``compacted``: the newest per key."""
    records = [(k, v) for k, v in sink.delivered.get(STATE, [])]
    if compacted:
        newest = dict(records)
        records = [(k, v) for k, v in newest.items() if v is not None]
    return records


def _processor(config, sink, data, *, crash_at=None, replay=None, compacted=False):
    store = PartitionStore(data, partition=0, run_id="test-run", chunk_bytes=16384, sync=False)

    def crash(point):
        raise Crash(point)

    state = PartitionState(store, run_id="test-run", partition=0, topic=STATE,
                           restore=lambda p: restore_from(_topic(sink, compacted), "test-run", p))
    return PartitionProcessor(config, 0, state=state, sink=sink, replay=replay,
                              crash=CrashPoints(crash_at, action=crash))


def _run(proc, messages, start, batch=2):
    for i in range(start, len(messages), batch):
        proc.process(messages[i:i + batch])


@pytest.mark.parametrize("compacted", [False, True])
def test_a_partition_without_its_disk_restores_from_the_state_topic(tmp_path, compacted):
    config = point_config(tmp_path, DPSYNTH_RELEASE_EVERY=str(RELEASE_EVERY))
    points = np.random.default_rng(1).random((8000, 2))
    messages = _messages(points)
    sink = MemorySink()
    first = _processor(config, sink, tmp_path / "a")
    _run(first, messages[:50], 0)  # 5000 records, a state commit with every release
    first.commit()
    t, watermark = first.synth.t, first.committed
    assert first.metrics.get("state_bytes_written", 0) < 0.5 * (
        first.metrics.get("state_commits", 0) * first.metrics.get("state_bytes", 0))
    first.close()
    replayed = []

    def replay(partition, start, end):
        replayed.append((start, end))
        return iter(messages[start:end])

    second = _processor(config, sink, tmp_path / "b", replay=replay, compacted=compacted)
    assert (second.synth.t, second.committed) == (t, watermark)  # no replay of the history
    assert second.metrics.get("state_restores", 0) == 1
    _run(second, messages, sink.group_offset)
    second.commit()
    assert replayed == [] and second.synth.t == len(points)
    stats = check_against_embedded(sink.records(config.output_topic), _expected(points),
                                   "test-run")
    assert stats["duplicates"] == 0
    second.close()


def test_a_crash_between_the_transaction_and_the_local_commit_keeps_both_consistent(tmp_path):
    config = point_config(tmp_path, DPSYNTH_RELEASE_EVERY=str(RELEASE_EVERY))
    points = np.random.default_rng(2).random((8000, 2))
    messages = _messages(points)
    sink = MemorySink()
    proc = _processor(config, sink, tmp_path / "a", crash_at=("after_transaction_commit", 4))
    with pytest.raises(Crash):
        _run(proc, messages, 0)
    sink.crash()
    proc.close()
    topic_state = restore_from(_topic(sink), "test-run", 0)
    with PartitionStore(tmp_path / "a", partition=0, run_id="test-run") as store:
        assert store.load().watermark < topic_state.watermark  # the topic is one commit ahead

    def replay(partition, start, end):
        return iter(messages[start:end])

    restarted = _processor(config, sink, tmp_path / "a", replay=replay)  # its own disk
    _run(restarted, messages, sink.group_offset)
    restarted.commit()
    restarted.close()
    # the state topic still rebuilds the newest state, and a disk-less worker continues it
    again = _processor(config, sink, tmp_path / "b", replay=replay)
    assert again.synth.t == len(points) and again.committed == len(messages) - 1
    again.close()
    check_against_embedded(sink.records(config.output_topic), _expected(points), "test-run")


def test_rebases_keep_what_a_restore_reads_bounded(tmp_path):
    config = point_config(tmp_path, DPSYNTH_RELEASE_EVERY="100")
    points = np.random.default_rng(3).random((20_000, 2))
    messages = _messages(points)
    sink = MemorySink()
    proc = _processor(config, sink, tmp_path / "a")
    _run(proc, messages, 0)
    proc.commit()
    assert proc.state.log.epoch >= 1  # the deltas added up to a state: a new base
    topic = _topic(sink, compacted=True)
    restored = restore_from(topic, "test-run", 0)
    assert restored.t == len(points)
    read = sum(len(v) for _, v in topic)
    assert read <= 3 * len(restored.snapshot)  # the base and at most about as much in deltas
    proc.close()
    shutil.rmtree(tmp_path / "a")
