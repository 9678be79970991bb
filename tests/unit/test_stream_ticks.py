"""Tick markers in the commit protocol, without a broker (docs/privacy.md P11).

The point engine with markers between the messages: under add/remove a step ends only at a
marker (records never end one), under replacement at N records or a marker; markers are never
counted, go through the watermark like records (a re-delivered marker is skipped, a crash and a
restart give the same releases), a marker of another run, with a forged tag or of a period
already applied is skipped. The expected releases are the embedded synthesizer's over the same
messages (tests/support/markers.py).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("rocksdict")

from dpsynth.release import decode_release  # noqa: E402
from dpsynth.schema import Schema  # noqa: E402
from dpsynth.stream.crash import CrashPoints  # noqa: E402
from dpsynth.stream.partitions import Operator  # noqa: E402
from dpsynth.stream.processor import InputMessage, PartitionProcessor  # noqa: E402
from dpsynth.stream.sink import DeliveryError  # noqa: E402
from dpsynth.stream.store import PartitionStore  # noqa: E402
from dpsynth.stream.ticker import MarkerWriter  # noqa: E402
from dpsynth.stream.ticks import MarkerKey, parse_marker, period_start_ms  # noqa: E402
from dpsynth.testing.kafka import TEST_KEY_HEX, encode_records, records_of  # noqa: E402
from tests.support.embedded import (  # noqa: E402
    MemorySink,
    check_against_embedded,
    crash_then_restart,
)
from tests.support.markers import (  # noqa: E402
    ManualClock,
    embedded_points_from_input,
    marker,
)
from tests.support.processor import point_config  # noqa: E402

PER_MESSAGE = 130


class Crash(Exception):
    """Stands in for SIGKILL."""


def _config(tmp_path, **extra):
    return point_config(tmp_path, **{"DPSYNTH_NEIGHBOURS": "add_remove", **extra})


def _processor(config, sink, crash_at=None, replay=None):
    store = PartitionStore(config.data_dir / "p0", partition=0, run_id=config.run_id,
                           chunk_bytes=16384, sync=False)

    def crash(point):
        raise Crash(point)

    return PartitionProcessor(config, 0, store=store, sink=sink,
                              crash=CrashPoints(crash_at, action=crash), replay=replay)


def _messages(points, marker_after=(2, 3, 7, 8, 12), extra=()):
    """Records in messages of PER_MESSAGE; a marker after the listed message indices (uneven
    steps, an empty step between 2 and 3), ``extra`` values appended at the end."""
    values, period = [], 0
    for k, i in enumerate(range(0, len(points), PER_MESSAGE)):
        values.append(encode_records(records_of(points[i:i + PER_MESSAGE])))
        if k in marker_after:
            period += 1
            values.append(marker(0, 60_000 * period))
    values += list(extra)
    return [InputMessage(offset=k, value=v) for k, v in enumerate(values)]


def _expected(messages, neighbours="add_remove", release_every=1000):
    schema = Schema.from_dict({"version": 1, "columns": [
        {"name": "x", "lower": 0, "upper": 1}, {"name": "y", "lower": 0, "upper": 1}]})
    per_sequence = embedded_points_from_input(
        [m.value for m in messages], schema, epsilon=1.0, release_every=release_every,
        max_depth=10, neighbours=neighbours)
    return {(0, s): r for s, r in per_sequence.items()}


def _run(proc, messages, start, batch=3):
    acked = start - 1
    for i in range(start, len(messages), batch):
        acked = proc.process(messages[i:i + batch])
    return acked


def test_marker_codec_and_tags():
    key = MarkerKey(bytes.fromhex(TEST_KEY_HEX), "test-run")
    found = parse_marker(key.encode(3, 120_000))
    assert (found.run_id, found.partition, found.at_ms) == ("test-run", 3, 120_000)
    assert key.accepts(found, 3) and not key.accepts(found, 2)
    assert not MarkerKey(bytes(32), "test-run").accepts(found, 3)  # another key's tag
    assert not MarkerKey(bytes.fromhex(TEST_KEY_HEX), "other").accepts(found, 3)
    assert parse_marker(encode_records({"x": 0.1, "y": 0.2})) is None
    assert parse_marker(b"\xc1" + b"__dpsynth_tick__") is None
    assert period_start_ms(1000.7, 0.25) == 1000_500
    assert TEST_KEY_HEX not in key.encode(0, 0).hex()  # the key never leaves


def test_P11_under_add_remove_steps_end_only_at_markers(tmp_path):
    config = _config(tmp_path)
    points = np.random.default_rng(1).random((2000, 2))
    messages = _messages(points)
    sink = MemorySink()
    proc = _processor(config, sink)
    _run(proc, messages, 0)
    proc.commit()
    assert proc.synth.t == len(points)  # markers are never records
    stats = check_against_embedded(sink.records(config.output_topic), _expected(messages),
                                   "test-run")
    assert stats["releases"] == 5  # one per marker, the empty step included
    last = decode_release(_expected(messages)[(0, 5)])
    assert last.metadata["step"] == 5 and last.metadata["release_every"] is None
    assert proc.metrics.get("tick_markers", 0) == 5
    proc.close()


def test_P11_skipped_markers_foreign_forged_and_repeated(tmp_path):
    config = _config(tmp_path)
    points = np.random.default_rng(2).random((600, 2))
    forged = bytearray(marker(0, 10**9))
    forged[-1] ^= 1  # a bad tag
    extra = [marker(0, 60_000), marker(0, 10**9, run_id="another-run"),
             marker(1, 10**9), bytes(forged), marker(0, 10**9), marker(0, 10**9)]
    messages = _messages(points, marker_after=(1,), extra=extra)
    sink = MemorySink()
    proc = _processor(config, sink)
    proc.process(messages)
    assert proc.synth.sequence == 2  # the first marker and one copy of period 10^9
    assert proc.metrics.get("tick_markers_skipped", 0) == 5
    assert proc.metrics.get("dead_lettered_messages", 0) == 0  # markers are not records
    assert proc.last_tick_ms == 10**9
    check_against_embedded(sink.records(config.output_topic), _expected(messages), "test-run")
    proc.close()


@pytest.mark.parametrize(("point", "visit"), [("mid_tick", 3), ("mid_release", 2),
                                              ("after_release_produced", 2),
                                              ("after_transaction_commit", 2),
                                              ("after_state_commit", 2)])
def test_P11_crash_and_restart_give_the_same_steps(tmp_path, point, visit):
    config = _config(tmp_path)
    points = np.random.default_rng(3).random((2000, 2))
    messages = _messages(points)
    sink = MemorySink()
    restarted = crash_then_restart(
        lambda sink, crash_at, replay: _processor(config, sink, crash_at, replay), sink,
        messages, crash_at=(point, visit), crash=Crash, batch=3)
    restarted.commit()
    assert restarted.last_tick_ms == restarted.store.load().last_tick_ms
    assert restarted.synth.t == len(points)  # every record once
    check_against_embedded(sink.records(config.output_topic), _expected(messages), "test-run")
    restarted.close()


def test_P11_under_replace_a_marker_releases_a_quiet_partition(tmp_path):
    config = _config(tmp_path, DPSYNTH_NEIGHBOURS="replace", DPSYNTH_RELEASE_EVERY="1000")
    points = np.random.default_rng(4).random((1500, 2))
    # 1500 records: a release at 1000, then the input stops; a marker releases the rest
    messages = _messages(points, marker_after=(11,), extra=[marker(0, 120_000)])
    sink = MemorySink()
    proc = _processor(config, sink)
    proc.process(messages)
    expected = _expected(messages, neighbours="replace")
    check_against_embedded(sink.records(config.output_topic), expected, "test-run")
    sizes = [decode_release(expected[(0, s)]).t for s in sorted(s for _, s in expected)]
    assert sizes == [1000, 1500]  # the second marker found nothing new: no release
    proc.close()


def _writer(config, sink, clock):
    return MarkerWriter(config.input_topic, config.tick_seconds,
                        MarkerKey(bytes.fromhex(TEST_KEY_HEX), config.run_id), sink, clock=clock)


def _sent(sink):
    return [(p, parse_marker(v)) for _, _, v, p in sink.sent]


def test_the_timer_writes_one_marker_per_partition_and_period(tmp_path):
    config = _config(tmp_path, DPSYNTH_TICK_SECONDS="2")
    sink, clock = MemorySink(), ManualClock(5.0)
    operator = Operator(config, marker_sink=sink, tick_clock=clock)
    writer = operator.ticker
    writer.own([0, 3])  # assigned in the period [4 s, 6 s): its marker at once
    assert writer.write_due() == 2
    clock.advance(1.5)  # 6.5
    writer.write_due()
    clock.advance(1.4)  # 7.9: same period, no second marker
    assert writer.write_due() == 0
    clock.advance(0.1)  # 8.0
    writer.write_due()
    sent = _sent(sink)
    assert [(p, m.partition, m.at_ms) for p, m in sent] == [
        (0, 0, 4000), (3, 3, 4000), (0, 0, 6000), (3, 3, 6000), (0, 0, 8000), (3, 3, 8000)]
    assert all(topic == config.input_topic for topic, _, _, _ in sink.sent)
    assert operator.metrics.get("tick_markers_written", 0) == 3


def test_a_writer_behind_writes_every_missed_period_in_order(tmp_path):
    config = _config(tmp_path, DPSYNTH_TICK_SECONDS="2")
    sink, clock = MemorySink(), ManualClock(100.0)
    writer = _writer(config, sink, clock)
    writer.own([1, 0])
    writer.write_due()
    clock.advance(7.0)  # 107.0: a pause over the boundaries 102, 104, 106
    assert writer.write_due() == 6
    assert [(p, m.at_ms) for p, m in _sent(sink)[2:]] == [
        (0, 102_000), (1, 102_000), (0, 104_000), (1, 104_000), (0, 106_000), (1, 106_000)]
    writer.disown([1])
    clock.advance(2.0)  # 109.0
    writer.write_due()
    writer.own([1])  # reassigned: the current period's marker at once, no backfill
    clock.advance(4.0)  # 113.0
    writer.write_due()
    tail = [(p, m.at_ms) for p, m in _sent(sink)[8:]]
    assert tail == [(0, 108_000), (1, 108_000), (0, 110_000), (1, 110_000), (0, 112_000),
                    (1, 112_000)]


class _FailingOnce(MemorySink):
    def flush(self):
        if self.fail:
            self.fail = False
            raise DeliveryError("broker unreachable")


def test_an_undelivered_marker_is_written_again_not_skipped(tmp_path):
    config = _config(tmp_path, DPSYNTH_TICK_SECONDS="2")
    sink, clock = _FailingOnce(), ManualClock(10.0)
    writer = _writer(config, sink, clock)
    writer.own([0])
    writer.write_due()
    clock.advance(2.0)
    sink.fail = True
    with pytest.raises(DeliveryError):
        writer.write_due()
    clock.advance(2.0)
    writer.write_due()  # 12 s again (its delivery is unknown), then 14 s
    assert [m.at_ms for _, m in _sent(sink)] == [10_000, 12_000, 12_000, 14_000]


def test_the_writer_thread_keeps_time_on_its_own(tmp_path):
    """The thread, driven by the clock alone: a jump over five boundaries gives five markers,
    one per period, however the thread was scheduled (the waits are hang guards)."""
    config = _config(tmp_path, DPSYNTH_TICK_SECONDS="0.5")
    sink, clock = MemorySink(), ManualClock(1000.2)
    writer = _writer(config, sink, clock)
    writer.start()
    try:
        writer.own([0])
        _wait(lambda: len(sink.sent) == 1)
        for _ in range(3):
            clock.advance(0.5)
        clock.advance(1.0)
        _wait(lambda: len(sink.sent) == 6)
    finally:
        writer.stop()
    assert [m.at_ms for _, m in _sent(sink)] == list(range(1_000_000, 1_003_000, 500))


def _wait(condition, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s  # a hang guard, not a timing assertion
    while not condition():
        assert time.monotonic() < deadline, "hang guard"
        time.sleep(0.005)
