"""The commit protocol of one partition, without a broker: a fake sink and a real RocksDB store.

Crashes are simulated by a crash action that raises instead of SIGKILL; the sink is an
in-memory broker with Kafka's transaction semantics (tests/support/embedded.py); the "restart"
is a new processor on the same store, fed again from the input offset committed in the last
transaction, as Kafka would, with a replay of the input for a state behind that offset.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

pytest.importorskip("rocksdict")

from dpsynth.errors import ConfigError  # noqa: E402
from dpsynth.stream.codecs import dead_letter_digest, decode_dead_letter  # noqa: E402
from dpsynth.stream.crash import CrashPoints  # noqa: E402
from dpsynth.stream.processor import InputMessage, PartitionProcessor  # noqa: E402
from dpsynth.stream.settings import load_config  # noqa: E402
from dpsynth.stream.store import PartitionStore  # noqa: E402
from dpsynth.testing.kafka import TEST_KEY_HEX, encode_records, records_of  # noqa: E402
from tests.support.embedded import (  # noqa: E402
    MemorySink,
    check_against_embedded,
    embedded_release_records,
)
from tests.support.processor import point_config  # noqa: E402

RELEASE_EVERY = 500
PER_MESSAGE = 130


class Crash(Exception):
    """Stands in for SIGKILL."""


@pytest.fixture
def config(tmp_path):
    return point_config(tmp_path, DPSYNTH_RELEASE_EVERY=str(RELEASE_EVERY))


def _messages(points):
    return [InputMessage(offset=k, value=encode_records(records_of(points[i:i + PER_MESSAGE])),
                         received=0.0)
            for k, i in enumerate(range(0, len(points), PER_MESSAGE))]


def _expected(points):
    per_sequence = embedded_release_records(
        points, epsilon=1.0, release_every=RELEASE_EVERY, max_depth=10, run_id="test-run",
        partition=0,
    )
    return {(0, s): r for s, r in per_sequence.items()}


def _processor(config, sink, crash_at=None, replay=None):
    store = PartitionStore(config.data_dir / "p0", partition=0, run_id=config.run_id,
                           chunk_bytes=16384, sync=False)

    def crash(point):
        raise Crash(point)

    return PartitionProcessor(config, 0, store=store, sink=sink,
                              crash=CrashPoints(crash_at, action=crash), replay=replay)


def _run(proc, messages, start, batch=3):
    """Deliver messages from offset ``start`` in batches; return the last published offset."""
    acked = start - 1
    for i in range(start, len(messages), batch):
        acked = proc.process(messages[i:i + batch])
    return acked


def test_uninterrupted_run_equals_the_embedded_engine(config):
    points = np.random.default_rng(1).random((3000, 2))
    messages = _messages(points)
    sink = MemorySink()
    proc = _processor(config, sink)
    assert _run(proc, messages, 0) == len(messages) - 1
    assert proc.synth.t == len(points)
    stats = check_against_embedded(sink.records(config.output_topic), _expected(points),
                                   "test-run")
    assert stats == {"records": stats["records"], "duplicates": 0, "releases": 6}
    proc.close()


@pytest.mark.parametrize(("point", "visit"), [
    ("mid_tick", 2),
    ("mid_release", 2),
    ("after_release_produced", 2),
    ("after_transaction_commit", 2),
    ("after_state_commit", 2),
    ("after_state_commit", 4),
])
def test_crash_at_each_step_then_restart_publishes_every_release_once(config, point, visit):
    points = np.random.default_rng(2).random((4000, 2))
    messages = _messages(points)
    sink = MemorySink()
    proc = _processor(config, sink, crash_at=(point, visit))
    with pytest.raises(Crash):
        _run(proc, messages, 0)
    sink.crash()  # the open transaction is aborted: its records never become visible
    proc.close()
    # Kafka re-delivers from the offset committed with the last transaction; a state behind
    # it is rebuilt by replay, without publishing again
    start = sink.group_offset or 0
    restarted = _processor(config, sink, replay=lambda p, s, e: iter(messages[s:e]))
    assert restarted.committed <= start - 1  # the state never runs ahead of the output
    _run(restarted, messages, start)
    assert restarted.synth.t == len(points)  # no record lost, none counted twice
    restarted.commit()
    stats = check_against_embedded(sink.records(config.output_topic), _expected(points),
                                   "test-run")
    assert stats["duplicates"] == 0  # what read_committed readers see: each release once
    aborted = len(sink.uncommitted(config.output_topic)) - stats["records"]
    if point in ("mid_release", "after_release_produced"):
        assert aborted > 0  # records of the aborted transaction were on the broker
    else:
        assert aborted == 0
    if point == "after_transaction_commit":
        assert restarted.metrics.get("releases_replayed", 0) >= 1  # recomputed, not repeated
    restarted.close()


def test_redelivery_at_or_below_the_watermark_is_skipped(config):
    points = np.random.default_rng(3).random((1500, 2))
    messages = _messages(points)
    proc = _processor(config, MemorySink())
    _run(proc, messages, 0)
    t = proc.synth.t
    proc.process(messages[:5])  # a re-delivery (e.g. offsets not yet committed to Kafka)
    assert proc.synth.t == t
    assert proc.metrics.get("records_skipped", 0) == 5
    proc.close()


def test_a_partition_without_state_is_rebuilt_by_replay_without_publishing_again(config):
    points = np.random.default_rng(4).random((3000, 2))
    messages = _messages(points)
    sink = MemorySink()
    first = _processor(config, sink)
    _run(first, messages[:10], 0)  # the first owner publishes two releases, commits offsets
    first.close()
    shutil.rmtree(config.data_dir / "p0")  # the next owner has no local state
    start = sink.group_offset
    assert 0 < start <= 10
    calls = []

    def replay(partition, begin, end):
        calls.append((partition, begin, end))
        return iter(messages[begin:end])

    proc = _processor(config, sink, replay=replay)
    _run(proc, messages, start)  # Kafka delivers from the committed offset
    assert calls == [(0, 0, start)]
    assert proc.synth.t == len(points)
    assert proc.metrics.get("messages_replayed", 0) == start
    assert proc.metrics.get("releases_replayed", 0) == 2  # recomputed, dropped
    stats = check_against_embedded(sink.records(config.output_topic), _expected(points),
                                   "test-run")
    assert stats["duplicates"] == 0
    proc.close()


def test_no_replay_when_delivery_starts_at_the_watermark(config):
    points = np.random.default_rng(5).random((1000, 2))
    messages = _messages(points)

    def replay(partition, start, end):
        raise AssertionError("no replay expected")

    proc = _processor(config, MemorySink(), replay=replay)
    _run(proc, messages, 0)
    proc.close()


def test_bad_records_are_dead_lettered_and_not_counted(config):
    good = np.random.default_rng(6).random((600, 2))
    values = [encode_records(records_of(good[:300])), b"\xc1",
              encode_records([{"x": 0.5}, {"x": 0.1, "y": 0.2}]),
              encode_records({"x": float("nan"), "y": 0.3}),
              encode_records(records_of(good[300:]))]
    messages = [InputMessage(offset=i, value=v) for i, v in enumerate(values)]
    sink = MemorySink()
    proc = _processor(config, sink)
    proc.process(messages)
    proc.commit()
    assert proc.synth.t == 601  # 600 good + the valid half of message 2
    letters = [decode_dead_letter(v) for _, v in sink.delivered[config.dead_letter_topic]]
    assert [d["offset"] for d in letters] == [1, 2, 3]
    assert letters[0]["rejects"][0][0] == -1
    assert letters[1]["rejects"] == [[0, "field 'y' is missing"]]
    assert letters[2]["reason"] == "field 'x' must be finite (NaN and ±inf are rejected)"
    assert letters[1]["hmac_sha256"] == dead_letter_digest(values[2], config.noise_key)
    assert letters[1]["key_fingerprint"] == config.noise_key.fingerprint
    assert "sha256" not in letters[1]  # no unsalted hash (issue 44)
    assert letters[1]["length"] == len(values[2]) and letters[1]["prefix"] == b""  # default 0
    assert proc.metrics.get("dead_lettered_records", 0) == 3
    proc.close()


def test_a_failed_delivery_commits_nothing(config):
    points = np.random.default_rng(7).random((1000, 2))
    messages = _messages(points)
    sink = MemorySink()
    proc = _processor(config, sink)
    proc.process(messages[:3])  # 390 records: no release yet, nothing committed
    sink.fail = True
    with pytest.raises(OSError):
        proc.process(messages[3:])
    proc.close()
    assert sink.records(config.output_topic) == [] and sink.group_offset is None
    with PartitionStore(config.data_dir / "p0", partition=0, run_id="test-run") as store:
        assert store.load() is None  # state only ever follows committed transactions


def test_a_checkpoint_commits_an_open_tick(config):
    points = np.random.default_rng(8).random((400, 2))
    proc = _processor(config, MemorySink())
    assert proc.process(_messages(points)) == -1  # open tick, nothing acknowledged
    assert proc.checkpoint_due(now=1e12)
    assert proc.commit() == 3
    proc.close()
    again = _processor(config, MemorySink())
    assert (again.synth.t, again.committed) == (400, 3)
    again.close()


def test_changed_parameters_refuse_the_stored_state(config, tmp_path):
    proc = _processor(config, MemorySink())
    proc.process(_messages(np.random.default_rng(9).random((600, 2))))
    proc.close()
    changed = load_config({
        "DPSYNTH_BROKER": "127.0.0.1:9", "DPSYNTH_SCHEMA_FILE": config.schema_file,
        "DPSYNTH_EPSILON": "0.5", "DPSYNTH_NOISE_KEY": TEST_KEY_HEX,
        "DPSYNTH_RUN_ID": "test-run", "DPSYNTH_RELEASE_EVERY": str(RELEASE_EVERY),
        "DPSYNTH_MAX_DEPTH": "10", "DPSYNTH_DATA_DIR": str(config.data_dir),
    })
    with pytest.raises(ConfigError, match="DPSYNTH_EPSILON differs"):
        _processor(changed, MemorySink())


def test_release_latency_and_state_metrics(config):
    points = np.random.default_rng(10).random((1000, 2))
    proc = _processor(config, MemorySink())
    proc.process(_messages(points))
    text = proc.metrics.render()
    assert 'dpsynth_release_latency_seconds_count{partition="0"} 2' in text
    assert 'dpsynth_t{partition="0"} 1000' in text
    assert proc.metrics.get("state_chunks_written", 0) >= 1
    proc.close()


@pytest.mark.parametrize("point", ["mid_release", "after_release_produced",
                                   "after_transaction_commit"])
def test_releases_sent_into_an_open_transaction_are_published_once(tmp_path, point):
    """Mid-batch the releases are sent into an open transaction (the broker takes them while
    the batch goes on) and committed at the batch's end: a crash in between shows none of them
    to read_committed readers, and the restart publishes each once."""
    config = point_config(tmp_path, DPSYNTH_RELEASE_EVERY=str(RELEASE_EVERY),
                          DPSYNTH_STATE_COMMIT_INTERVAL_S="3600")  # no commit mid-batch
    points = np.random.default_rng(12).random((6000, 2))
    messages = _messages(points)
    sink = MemorySink()
    proc = _processor(config, sink, crash_at=(point, 2))
    with pytest.raises(Crash):
        _run(proc, messages, 0, batch=12)  # 1560 records a batch: 3 releases each
    sink.crash()
    proc.close()
    start = sink.group_offset or 0
    restarted = _processor(config, sink, replay=lambda p, s, e: iter(messages[s:e]))
    _run(restarted, messages, start, batch=12)
    restarted.commit()
    assert restarted.synth.t == len(points)
    stats = check_against_embedded(sink.records(config.output_topic), _expected(points),
                                   "test-run")
    assert stats["duplicates"] == 0
    assert sink.transactions < stats["releases"]  # a batch's releases: one transaction
    restarted.close()
