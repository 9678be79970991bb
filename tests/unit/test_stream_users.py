"""The worker under the privacy unit "user" without a broker (docs/privacy.md P15): the key
check, per-user counts in the store's atomic commit, crashes, and the user cache."""

from __future__ import annotations

import json

import msgpack
import numpy as np
import pytest

pytest.importorskip("rocksdict")

from dpsynth.bounding import UserCounts  # noqa: E402
from dpsynth.errors import ConfigError  # noqa: E402
from dpsynth.schema import Column, Schema  # noqa: E402
from dpsynth.stream.changelog import restore_from  # noqa: E402
from dpsynth.stream.codecs import decode_dead_letter  # noqa: E402
from dpsynth.stream.crash import CrashPoints  # noqa: E402
from dpsynth.stream.persist import PartitionState  # noqa: E402
from dpsynth.stream.processor import InputMessage, PartitionProcessor  # noqa: E402
from dpsynth.stream.routing import UserRouting, murmur2, partition_of  # noqa: E402
from dpsynth.stream.settings import load_config  # noqa: E402
from dpsynth.stream.store import PartitionStore  # noqa: E402
from dpsynth.testing.kafka import TEST_KEY_HEX  # noqa: E402
from tests.support.embedded import (  # noqa: E402
    MemorySink,
    check_against_embedded,
    crash_then_restart,
    embedded_release_records,
)
from tests.support.processor import point_config  # noqa: E402

PARTITIONS, OWN = 4, 2
K = 3
RELEASE_EVERY = 200

# Kafka's own murmur2 test vectors (clients' UtilsTest), and librdkafka's 'kafka'.
MURMUR2 = {"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
           "a-little-bit-longer-string": -1486304829,
           "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, "abc": 479470107,
           "kafka": -798503068, "": 275646681}


class Crash(Exception):
    """Stands in for SIGKILL."""


@pytest.mark.parametrize("text", sorted(MURMUR2))
def test_P15_murmur2_is_kafkas(text: str) -> None:
    assert murmur2(text.encode()) == MURMUR2[text]


def own_users(n: int, seed: int) -> list[str]:
    """User ids (heavy-tailed) that Kafka's default partitioner sends to partition OWN."""
    rng = np.random.default_rng(seed)
    pool = [f"user-{i}" for i in range(4000)]
    pool = [u for u in pool if partition_of(u.encode(), PARTITIONS) == OWN]
    return [pool[i] for i in rng.zipf(1.3, n) % len(pool)]


@pytest.fixture
def config(tmp_path):
    return point_config(
        tmp_path, user_column="uid", DPSYNTH_RELEASE_EVERY=str(RELEASE_EVERY),
        DPSYNTH_PRIVACY_UNIT="user", DPSYNTH_MAX_CONTRIBUTIONS=str(K),
        DPSYNTH_INPUT_PARTITIONS=str(PARTITIONS), DPSYNTH_USER_CACHE_ENTRIES="50")


def _messages(points: np.ndarray, users: list[str]) -> list[InputMessage]:
    """One record per message, keyed by its user, the id also in the record."""
    return [InputMessage(offset=i, key=u.encode(), value=msgpack.packb(
        {"x": float(p[0]), "y": float(p[1]), "uid": u})) for i, (p, u) in
        enumerate(zip(points, users, strict=True))]


def _processor(config, sink, crash_at=None, replay=None):
    store = PartitionStore(config.data_dir / "p2", partition=OWN, run_id=config.run_id,
                           chunk_bytes=16384, sync=False)

    def crash(point):
        raise Crash(point)

    return PartitionProcessor(config, OWN, store=store, sink=sink,
                              crash=CrashPoints(crash_at, action=crash), replay=replay)


def _expected(points: np.ndarray, users: list[str]) -> dict:
    per_sequence = embedded_release_records(
        points, epsilon=1.0, release_every=RELEASE_EVERY, max_depth=10, run_id="test-run",
        partition=OWN, users=users, privacy_unit="user", max_contributions=K)
    return {(OWN, s): r for s, r in per_sequence.items()}


def test_P15_the_worker_bounds_users_as_the_embedded_engine_does(config):
    rng = np.random.default_rng(1)
    users = own_users(4000, 1)
    points = rng.random((4000, 2))
    sink = MemorySink()
    proc = _processor(config, sink)
    messages = _messages(points, users)
    for i in range(0, len(messages), 97):
        proc.process(messages[i:i + 97])
    proc.commit()
    assert proc.synth.t == sum(min(users.count(u), K) for u in set(users))
    assert proc.metrics.get("records_dropped", OWN) == len(users) - proc.synth.t
    stats = check_against_embedded(sink.records(config.output_topic),
                                   _expected(points, users), "test-run")
    assert stats["releases"] >= 3 and stats["duplicates"] == 0
    stored = proc.store.read_users(proc.synth.synth.users.hash([u.encode() for u in set(users)]))
    assert stored.counts.max() == K and stored.counts.min() >= 1
    proc.close()


def test_P15_foreign_unkeyed_and_mismatched_messages_are_dead_lettered(config):
    other = next(f"u{i}" for i in range(100) if partition_of(f"u{i}".encode(), PARTITIONS) != OWN)
    mine = next(f"u{i}" for i in range(100) if partition_of(f"u{i}".encode(), PARTITIONS) == OWN)
    values = [msgpack.packb({"x": 0.1, "y": 0.2, "uid": u}) for u in (other, mine, mine, "zz")]
    messages = [InputMessage(0, values[0], key=other.encode()),
                InputMessage(1, values[1], key=None),
                InputMessage(2, values[2], key=mine.encode()),
                InputMessage(3, values[3], key=mine.encode())]
    sink = MemorySink()
    proc = _processor(config, sink)
    proc.process(messages)
    proc.commit()
    assert proc.synth.t == 1
    letters = [decode_dead_letter(v) for _, v in sink.delivered[config.dead_letter_topic]]
    assert [d["offset"] for d in letters] == [0, 1, 3]
    assert f"hashes to partition {partition_of(other.encode(), PARTITIONS)} of 4, not 2" in \
        letters[0]["reason"]
    assert letters[1]["reason"].startswith("message has no key")
    assert letters[2]["rejects"] == [[0, "user id field 'uid' must equal the message key"]]
    for d in letters:  # reasons name the rule, never the id or the key
        assert other not in d["reason"] and mine not in d["reason"] and "zz" not in d["reason"]
    proc.close()


def test_routing_without_a_user_column_takes_the_key_as_the_id() -> None:
    schema = Schema((Column("x", 0, 1),))
    mine = next(f"u{i}".encode() for i in range(100) if partition_of(f"u{i}".encode(), 4) == 1)
    routing = UserRouting(1, 4, None)
    batch = routing.split(schema, [msgpack.packb([{"x": 0.5}, {"x": 0.7}])] * 2, [mine, None])
    assert batch.users == [mine, mine] and list(batch.rejects) == [1]


@pytest.mark.parametrize(("point", "visit"), [
    ("mid_tick", 3), ("mid_release", 2), ("after_release_produced", 2),
    ("after_transaction_commit", 2), ("after_state_commit", 1), ("after_state_commit", 3)])
def test_P15_a_crash_never_lets_a_user_exceed_k(config, point, visit):
    """A heavy user's records keep arriving around each crash; after the restart the store
    holds exactly its first K, and the releases are the embedded engine's."""
    rng = np.random.default_rng(7)
    users = own_users(3000, 7)
    heavy = max(set(users), key=users.count)
    assert users.count(heavy) > 10 * K
    points = rng.random((3000, 2))
    sink = MemorySink()
    restarted = crash_then_restart(
        lambda sink, crash_at, replay: _processor(config, sink, crash_at, replay), sink,
        _messages(points, users), crash_at=(point, visit), crash=Crash, batch=50)
    restarted.commit()
    key = restarted.synth.synth.users.hash([heavy.encode()])
    assert int(restarted.store.read_users(key).counts[0]) == K
    assert restarted.synth.t == sum(min(users.count(u), K) for u in set(users))
    check_against_embedded(sink.records(config.output_topic), _expected(points, users),
                           "test-run")
    restarted.close()


def test_P15_a_partition_restored_from_the_state_topic_keeps_every_users_count(config):
    """A worker without the partition's disk restores the per-user counts from the state
    topic with the state: no user can exceed k after the move."""
    users = own_users(3000, 9)
    heavy = max(set(users), key=users.count)
    points = np.random.default_rng(9).random((3000, 2))
    sink = MemorySink()

    def make(name, restore=None):
        store = PartitionStore(config.data_dir / name, partition=OWN, run_id=config.run_id,
                               chunk_bytes=16384, sync=False)
        state = PartitionState(store, run_id=config.run_id, partition=OWN, topic="state",
                               restore=restore)
        return PartitionProcessor(config, OWN, state=state, sink=sink)

    first = make("a")
    messages = _messages(points, users)
    for i in range(0, 2000, 50):
        first.process(messages[i:i + 50])
    first.commit()
    t = first.synth.t
    first.close()
    second = make("b", lambda p: restore_from(list(sink.delivered["state"]), config.run_id, p))
    key = second.synth.synth.users.hash([heavy.encode()])
    assert second.synth.t == t and int(second.store.read_users(key).counts[0]) == K
    for i in range(2000, 3000, 50):
        second.process(messages[i:i + 50])
    second.commit()
    assert second.synth.t == sum(min(users.count(u), K) for u in set(users))
    check_against_embedded(sink.records(config.output_topic), _expected(points, users),
                           "test-run")
    second.close()


def test_P15_the_store_commits_user_counts_with_the_watermark(tmp_path):
    keys = np.array([[1, 3], [5, 7], [9, 11]], np.uint64)
    with PartitionStore(tmp_path / "p0", partition=0, run_id="r", sync=False) as store:
        store.commit(b"s" * 10, watermark=4, t=3, sequence=0, config={},
                     users=UserCounts(keys[:2], np.array([2, 1], np.uint16)))
        store.commit(b"s" * 10, watermark=9, t=4, sequence=0, config={},
                     users=UserCounts(keys[1:], np.array([2, 5], np.uint16)))
    with PartitionStore(tmp_path / "p0", partition=0, run_id="r", sync=False) as store:
        assert store.load().watermark == 9
        got = store.read_users(np.concatenate([keys, [[2, 2]]]).astype(np.uint64))
        assert got.counts.tolist() == [2, 2, 5, 0]
    stepped = UserCounts(keys, np.array([3, 1, 2], np.uint16), np.array([7, 8, 9], np.int64),
                         np.array([1, 1, 2], np.uint16))
    with PartitionStore(tmp_path / "p1", partition=1, run_id="r", sync=False) as store:
        store.commit(b"", watermark=0, t=0, sequence=0, config={}, users=stepped)
        got = store.read_users(keys)
        assert got.counts.tolist() == [3, 1, 2] and got.steps.tolist() == [7, 8, 9]
        assert got.step_counts.tolist() == [1, 1, 2]


def test_a_store_with_few_users_is_loaded_whole_and_a_large_one_read_as_needed(tmp_path):
    keys = np.array([[1, 3], [5, 7], [9, 11]], np.uint64)
    with PartitionStore(tmp_path / "p0", partition=0, run_id="r", sync=False) as store:
        store.commit(b"s", watermark=4, t=3, sequence=0, config={},
                     users=UserCounts(keys, np.array([2, 1, 4], np.uint16)))
        loaded = store.load_users(3)
        assert loaded is not None and store.load_users(2) is None
        assert loaded.keys.tolist() == keys.tolist() and loaded.counts.tolist() == [2, 1, 4]


def test_the_state_is_bound_to_the_unit_k_and_the_partition_count(config, tmp_path):
    users = own_users(300, 3)
    proc = _processor(config, MemorySink())
    proc.process(_messages(np.random.default_rng(3).random((300, 2)), users))
    proc.commit()
    proc.close()
    for change in ({"input_partitions": 8}, {"max_contributions": 4}):
        with pytest.raises(ConfigError, match="cannot change"):
            _processor(config.model_copy(update=change), MemorySink())


def test_a_tabular_worker_refuses_the_user_unit(tmp_path):
    domain = tmp_path / "domain.json"
    domain.write_text(json.dumps({"a": 2, "b": 3}))
    with pytest.raises(ConfigError, match="point engine only"):
        load_config({"DPSYNTH_BROKER": "127.0.0.1:9", "DPSYNTH_ENGINE": "tabular",
                     "DPSYNTH_DOMAIN_FILE": str(domain), "DPSYNTH_EPSILON": "1",
                     "DPSYNTH_NOISE_KEY": TEST_KEY_HEX, "DPSYNTH_PRIVACY_UNIT": "user",
                     "DPSYNTH_MAX_CONTRIBUTIONS": "4"})


def test_the_partition_count_comes_from_the_topic_and_must_match_a_declared_one(config):
    from dpsynth.cli.worker import with_input_partitions

    undeclared = config.model_copy(update={"input_partitions": 0})
    assert with_input_partitions(undeclared, 6).input_partitions == 6
    assert with_input_partitions(config, PARTITIONS) is not None
    with pytest.raises(ConfigError, match="DPSYNTH_INPUT_PARTITIONS \\(4\\) differs"):
        with_input_partitions(config, 8)
    record = config.model_copy(update={"privacy_unit": "record"})
    assert with_input_partitions(record, 8).input_partitions == PARTITIONS  # not read
