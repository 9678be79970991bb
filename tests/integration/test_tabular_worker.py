"""The worker with the tabular engine (``DPSYNTH_ENGINE=tabular``) on a real broker and RocksDB.

Every test runs ``python -m dpsynth worker`` as a subprocess on fresh topics and compares the
synthetic topic with the embedded ``TabularSynthesizer(..., partition=p)`` fed the same records
under the same key (``tests.support.tabular``): byte-identical records, every release exactly once.
A crash uses the commit protocol's crash points (``DPSYNTH_CRASH_AT``); a lost data directory is
restored from the state topic (a tabular snapshot's base and deltas). The crash test runs the
tabular default, add/remove: steps end only at tick markers (written into the input between the
records and by the worker's timer), and the reference is the embedded synthesizer replayed over the
input partition, markers included; the others run under replacement with a step every RELEASE_EVERY
records (``DPSYNTH_TICK_SECONDS=0``).
"""

from __future__ import annotations

import shutil
import signal
import time

import numpy as np
import pytest

from dpsynth.keys import NoiseKey
from dpsynth.stream.codecs import dead_letter_digest, decode_dead_letter
from dpsynth.tabular.domain import Domain
from dpsynth.testing.kafka import (
    TEST_KEY_HEX,
    WorkerProcess,
    committed_offsets,
    create_topics,
    encode_records,
    end_offsets,
    produce_messages,
    read_topic,
    unique_topics,
)
from tests.support.markers import (
    committed_watermark,
    counted_through,
    embedded_tabular_from_input,
    expected_through,
    input_values,
    marker,
)
from tests.support.tabular import (
    SMALL_DOMAIN,
    check_tabular_against_embedded,
    embedded_tabular_release_records,
    tabular_worker_env,
    write_domain,
)

pytestmark = pytest.mark.kafka

DOMAIN = Domain.from_dict(SMALL_DOMAIN)
RELEASE_EVERY = 500
KEY = NoiseKey.from_hex(TEST_KEY_HEX, "test")  # the workers' key: matches dead letters
PER_MESSAGE = 90  # not a divisor of RELEASE_EVERY: batches end mid-step


def _codes(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    first = rng.integers(0, DOMAIN.sizes[0], n)
    cols = [first] + [np.where(rng.random(n) < 0.7, first % s, rng.integers(0, s, n))
                      for s in DOMAIN.sizes[1:]]
    return np.stack(cols, axis=1).astype(np.int64)


def _messages(codes: np.ndarray, partition: int = 0) -> list[tuple[int, bytes]]:
    return [(partition, encode_records(DOMAIN.decode(codes[i:i + PER_MESSAGE])))
            for i in range(0, len(codes), PER_MESSAGE)]


def _expected(codes: np.ndarray, partition: int = 0) -> dict:
    per_sequence = embedded_tabular_release_records(
        codes, domain=DOMAIN, epsilon=1.0, release_every=RELEASE_EVERY, run_id="test-run",
        partition=partition, neighbours="replace",
    )
    return {(partition, s): r for s, r in per_sequence.items()}


def _done(counts: dict[str, tuple[int, int]]):
    """Every partition p has t == counts[p][0] and watermark == counts[p][1]."""
    def predicate(m: dict) -> bool:
        return all(m.get("dpsynth_t", {}).get(p) == t
                   and m.get("dpsynth_watermark", {}).get(p) == w
                   for p, (t, w) in counts.items())
    return predicate


def test_two_partitions_equal_the_embedded_synthesizer_and_bad_records_are_dead_lettered(
    kafka_bootstrap, tmp_path
):
    codes = {0: _codes(2500, 1), 1: _codes(2000, 2)}
    messages = {p: _messages(c, p) for p, c in codes.items()}
    # bad input into partition 0 between good messages: outside the domain, missing, garbage
    bad = [
        (encode_records({"colour": "ultraviolet", "member": "no", "age4": 0, "score5": 1}),
         "attribute 'colour': unknown category"),
        (encode_records({"colour": "red", "member": "yes", "age4": 17, "score5": 1}),
         "attribute 'age4': code out of range"),
        (encode_records({"colour": "red", "member": "yes", "age4": 1}),
         "attribute 'score5': missing"),
        (b"\xc1\x00garbage", "not valid msgpack"),
    ]
    stream0, reasons = [], {}
    for i, message in enumerate(messages[0]):
        stream0.append(message)
        if i < len(bad):
            reasons[len(stream0)] = bad[i][1]
            stream0.append((0, bad[i][0]))
    topics = unique_topics("tabular-e2e")
    create_topics(kafka_bootstrap, {topics.input: 2, topics.output: 1, topics.dead_letter: 1})
    produce_messages(kafka_bootstrap, topics.input, stream0 + messages[1])
    env = tabular_worker_env(kafka_bootstrap, topics, write_domain(tmp_path / "domain.json"),
                             tmp_path / "data", release_every=RELEASE_EVERY,
                             neighbours="replace", tick_seconds=0)
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        metrics = worker.wait_for(_done({"0": (2500, len(stream0) - 1),
                                         "1": (2000, len(messages[1]) - 1)}), timeout_s=120)
    assert metrics["dpsynth_dead_lettered_records_total"]["0"] == len(bad)
    expected = {**_expected(codes[0], 0), **_expected(codes[1], 1)}
    stats = check_tabular_against_embedded(read_topic(kafka_bootstrap, topics.output), expected,
                                           "test-run")
    assert (stats["releases"], stats["duplicates"]) == (5 + 4, 0)
    assert expected[(0, 1)][1:] != expected[(1, 1)][1:]  # partitions draw their own noise
    dead = [decode_dead_letter(r.value) for r in read_topic(kafka_bootstrap, topics.dead_letter)]
    assert sorted(d["offset"] for d in dead) == sorted(reasons)
    for letter in dead:
        assert reasons[letter["offset"]] in letter["reason"]
        assert letter["hmac_sha256"] == dead_letter_digest(stream0[letter["offset"]][1], KEY)
        assert "ultraviolet" not in letter["reason"] and "17" not in letter["reason"]
    assert "ultraviolet" not in worker.log_path.read_text()


@pytest.mark.parametrize(("point", "visit"), [
    ("mid_release", 3),
    ("after_transaction_commit", 2),
])
def test_sigkill_in_the_middle_then_restart_continues_identically(
    kafka_bootstrap, tmp_path, point, visit
):
    codes = _codes(4000, 3)
    messages = []  # add/remove: a tick marker after every 6th message (540 records)
    for k, message in enumerate(_messages(codes)):
        messages.append(message)
        if k % 6 == 5:
            messages.append((0, marker(0, 1000 * (k + 1))))  # old periods: before the timer's
    topics = unique_topics(f"tabular-crash-{point.replace('_', '-')}")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    produce_messages(kafka_bootstrap, topics.input, messages)
    end = end_offsets(kafka_bootstrap, topics.input)[0]
    env = tabular_worker_env(kafka_bootstrap, topics, write_domain(tmp_path / "domain.json"),
                             tmp_path / "data", tick_seconds=1,
                             batch_max_events=4, release_linger_s=0,
                             state_commit_interval_s=0,  # a state commit with every release
                             group_instance_id="worker-0")
    log = tmp_path / "worker.log"

    crashing = WorkerProcess({**env, "DPSYNTH_CRASH_AT": f"{point}:{visit}"}, log).start()
    status = crashing.wait_exit(120)
    crashing.stop()
    assert status == -signal.SIGKILL, crashing.log_tail()
    assert f"DPSYNTH_CRASH_AT={point}:{visit} reached" in log.read_text()
    partial = read_topic(kafka_bootstrap, topics.output)
    assert 0 < len(partial)  # the crash came after some releases, before the end

    with WorkerProcess(env, log) as worker:
        metrics = worker.wait_for(counted_through(len(codes), end), timeout_s=120)
        assert "state restored at t=" in log.read_text()
    if point == "after_transaction_commit":  # the state lagged the published offset
        assert metrics["dpsynth_releases_replayed_total"]["0"] > 0  # recomputed, not repeated
    values = input_values(kafka_bootstrap, topics.input)

    def reference(upto: int) -> dict:
        return {(0, s): r for s, r in embedded_tabular_from_input(
            values[:upto], DOMAIN, epsilon=1.0, release_every=1000).items()}

    records = read_topic(kafka_bootstrap, topics.output)
    expected = expected_through(reference(len(values)),
                                reference(committed_watermark(tmp_path / "data") + 1), records)
    stats = check_tabular_against_embedded(records, expected, "test-run")
    assert stats["releases"] >= len(messages) // 7  # at least the test's markers
    assert stats["duplicates"] == 0  # read_committed: the killed transaction is not seen


def test_partition_without_local_state_is_restored_from_the_state_topic(
    kafka_bootstrap, tmp_path
):
    codes = _codes(3000, 4)
    messages = _messages(codes)
    before, after = messages[:20], messages[20:]  # 1800 records: the 4th step is open
    topics = unique_topics("tabular-replay")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    produce_messages(kafka_bootstrap, topics.input, before)
    env = tabular_worker_env(kafka_bootstrap, topics, write_domain(tmp_path / "domain.json"),
                             tmp_path / "data", release_every=RELEASE_EVERY,
                             checkpoint_interval_s=0.5, neighbours="replace", tick_seconds=0)
    with WorkerProcess(env, tmp_path / "first.log") as worker:
        worker.wait_for(_done({"0": (1800, len(before) - 1)}))  # open step checkpointed too
        deadline = time.monotonic() + 30  # committed with the releases' transactions
        while committed_offsets(kafka_bootstrap, env["DPSYNTH_GROUP_ID"], topics.input,
                                1)[0] != len(before):
            assert time.monotonic() < deadline, "group offset not committed"
            time.sleep(0.5)
    shutil.rmtree(tmp_path / "data")  # the state is lost; the group offset (20) is not
    produce_messages(kafka_bootstrap, topics.input, after)
    with WorkerProcess(env, tmp_path / "second.log") as worker:
        metrics = worker.wait_for(_done({"0": (len(codes), len(messages) - 1)}))
    assert metrics["dpsynth_state_restores_total"]["0"] == 1
    assert "dpsynth_messages_replayed_total" not in metrics  # the open step came back too
    assert "state restored from the state topic" in (tmp_path / "second.log").read_text()
    stats = check_tabular_against_embedded(read_topic(kafka_bootstrap, topics.output),
                                           _expected(codes), "test-run")
    assert stats["releases"] == len(codes) // RELEASE_EVERY
    assert stats["duplicates"] == 0
