"""The privacy unit "user" on a real broker and RocksDB (docs/privacy.md P15).

Records are produced keyed by user id through librdkafka's ``murmur2_random`` partitioner
(Kafka's default for keyed records) into a two-partition input topic; one heavy user sends
thousands of records in the middle of the stream. The worker is killed with SIGKILL while it is
inside the heavy user's records (its drop counter has started to move), then restarted on the
same data directory. Checked afterwards: every message landed on the partition the worker's
check computes; the heavy user's stored count is exactly k and each partition's t is
Σ min(records, k) over its users (so no user exceeded k, across the kill or across partitions);
every release on the synthetic topic is byte-identical to the embedded synthesizer fed the
partition's records with their users; a message sent to the wrong partition is dead-lettered.
"""

from __future__ import annotations

from collections import Counter

import msgpack
import numpy as np
import pytest

from dpsynth.noise import KeyedNoise
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.online.users import UserLevel
from dpsynth.release import encode_release
from dpsynth.stream.codecs import decode_dead_letter
from dpsynth.stream.routing import partition_of
from dpsynth.stream.store import PartitionStore
from dpsynth.testing.kafka import (
    TEST_KEY_HEX,
    WorkerProcess,
    create_topics,
    end_offsets,
    read_topic,
    unique_topics,
    worker_env,
)
from tests.support.embedded import check_against_embedded, embedded_release_records

pytestmark = pytest.mark.kafka

K = 5
RELEASE_EVERY = 100
PARTITIONS = 2


def _stream(n_light: int, n_heavy: int, seed: int) -> list[tuple[str, float, float]]:
    """(user, x, y) in order: light users, then the heavy user interleaved with light ones."""
    rng = np.random.default_rng(seed)
    light = [f"user-{u}" for u in rng.integers(0, 400, n_light)]
    heavy = ["heavy-user"] * n_heavy
    middle = [u for pair in zip(heavy, light[n_light // 3:], strict=False) for u in pair]
    users = light[:n_light // 3] + middle + light[n_light // 3 + len(heavy):]
    xy = rng.random((len(users), 2))
    return [(u, float(x), float(y)) for u, (x, y) in zip(users, xy, strict=True)]


def _produce(bootstrap: str, topic: str, rows: list[tuple[str, float, float]]) -> list[int]:
    """One message per record, keyed by user, Kafka's default partitioner; the partitions."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, "partitioner": "murmur2_random"})
    landed: list[int] = [-1] * len(rows)

    def delivered(i: int):  # noqa: ANN202
        def callback(err, msg) -> None:  # noqa: ANN001
            assert err is None, err
            landed[i] = msg.partition()
        return callback

    for i, (user, x, y) in enumerate(rows):
        value = msgpack.packb({"x": x, "y": y, "uid": user})
        while True:
            try:
                producer.produce(topic, key=user.encode(), value=value, on_delivery=delivered(i))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    return landed


def test_P15_sigkill_inside_a_heavy_users_records_never_lets_it_exceed_k(kafka_bootstrap,
                                                                         tmp_path):
    rows = _stream(4000, 3000, seed=16)
    topics = unique_topics("users")
    create_topics(kafka_bootstrap, {topics.input: PARTITIONS, topics.output: 1,
                                    topics.dead_letter: 1})
    landed = _produce(kafka_bootstrap, topics.input, rows)
    assert landed == [partition_of(u.encode(), PARTITIONS) for u, _, _ in rows]
    heavy_partition = partition_of(b"heavy-user", PARTITIONS)
    from confluent_kafka import Producer  # one message on the wrong partition: dead-lettered

    stray = Producer({"bootstrap.servers": kafka_bootstrap})
    stray.produce(topics.input, key=b"heavy-user", partition=1 - heavy_partition,
                  value=msgpack.packb({"x": 0.5, "y": 0.5, "uid": "heavy-user"}))
    stray.flush(30)
    ends = end_offsets(kafka_bootstrap, topics.input)

    schema = tmp_path / "schema.json"
    schema.write_text('{"version": 1, "user_column": "uid", "columns": ['
                      '{"name": "x", "lower": 0, "upper": 1}, {"name": "y", "lower": 0, '
                      '"upper": 1}]}')
    env = worker_env(kafka_bootstrap, topics, schema, tmp_path / "data", batch_max_events=16,
                     release_every=RELEASE_EVERY, release_linger_s=0, tick_seconds=0,
                     privacy_unit="user", max_contributions=K, group_instance_id="worker-0")
    log = tmp_path / "worker.log"
    hp = str(heavy_partition)
    with WorkerProcess(env, log) as first:  # killed inside the heavy user's records
        at_kill = first.wait_for(
            lambda m: m.get("dpsynth_records_dropped_total", {}).get(hp, 0) > 0, timeout_s=120)
        first.kill()
    # the kill came with most of the heavy user's records still to be read
    assert at_kill["dpsynth_watermark"].get(hp, -1) < ends[heavy_partition] - 2000
    counted = {p: sum(min(n, K) for (u, n) in Counter(
        u for (u, _, _), q in zip(rows, landed, strict=True) if q == p).items())
        for p in range(PARTITIONS)}
    with WorkerProcess(env, log) as worker:
        worker.wait_for(lambda m: all(
            m.get("dpsynth_t", {}).get(str(p)) == counted[p] and
            m.get("dpsynth_watermark", {}).get(str(p), -1) >= ends[p] - 1
            for p in range(PARTITIONS)), timeout_s=180)

    # the heavy user's count in its partition's store: exactly k
    heavy_key = UserLevel(1.0, K, None, KeyedNoise(bytes.fromhex(TEST_KEY_HEX))).hash(
        [b"heavy-user"])
    with PartitionStore(tmp_path / "data" / "state" / f"p{hp}", partition=heavy_partition,
                        run_id="test-run", sync=False) as store:
        assert int(store.read_users(heavy_key).counts[0]) == K

    # releases: byte-identical to the embedded synthesizer over each partition's records
    expected = {}
    for p in range(PARTITIONS):
        mine = [(u, x, y) for (u, x, y), q in zip(rows, landed, strict=True) if q == p]
        expected.update({(p, s): r for s, r in embedded_release_records(
            np.array([(x, y) for _, x, y in mine]), epsilon=1.0, release_every=RELEASE_EVERY,
            max_depth=12, run_id="test-run", partition=p, users=[u for u, _, _ in mine],
            privacy_unit="user", max_contributions=K).items()})
    check_against_embedded(read_topic(kafka_bootstrap, topics.output), expected, "test-run")
    # dead letters are published once, in the release transactions (whichever worker read the
    # stray message: the one killed or the restarted one), a read_committed reader sees one
    letters = [decode_dead_letter(r.value)
               for r in read_topic(kafka_bootstrap, topics.dead_letter)]
    assert len(letters) == 1
    assert letters[0]["partition"] == 1 - heavy_partition
    assert "hashes to partition" in letters[0]["reason"]
    assert b"heavy-user" not in log.read_bytes()


def test_P15_a_step_of_only_dead_letters_under_the_user_unit_is_an_ordinary_empty_step(
        kafka_bootstrap, tmp_path):
    """Issue 25: between two tick markers only bad messages (all dead-lettered), under the
    privacy unit "user" and add/remove: the worker used to raise, exit 3 and crash again on the
    same input after every restart. Now the step releases (empty) and the partition goes on;
    the releases equal the embedded synthesizer's, stepped at the same markers."""
    from tests.support.markers import marker

    topics = unique_topics("users-empty")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    rng = np.random.default_rng(25)
    good = [(f"u{i % 7}", *rng.random(2)) for i in range(60)]
    pieces: list[tuple[bytes | None, bytes]] = []  # (key, value), in offset order
    pieces += [(u.encode(), msgpack.packb({"x": x, "y": y, "uid": u})) for u, x, y in good[:30]]
    pieces += [(None, marker(0, 1000))]
    pieces += [(b"u1", b"\xc1\x00garbage"), (b"u2", msgpack.packb({"x": 0.5})),
               (b"u3", msgpack.packb({"x": float("nan"), "y": 0.1, "uid": "u3"}))]
    pieces += [(None, marker(0, 2000)), (None, marker(0, 3000))]  # and a step with nothing
    pieces += [(u.encode(), msgpack.packb({"x": x, "y": y, "uid": u})) for u, x, y in good[30:]]
    pieces += [(None, marker(0, 4000))]
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for key, value in pieces:
        producer.produce(topics.input, key=key, value=value, partition=0)
    assert producer.flush(30) == 0

    schema = tmp_path / "schema.json"
    schema.write_text('{"version": 1, "user_column": "uid", "columns": ['
                      '{"name": "x", "lower": 0, "upper": 1}, {"name": "y", "lower": 0, '
                      '"upper": 1}]}')
    env = worker_env(kafka_bootstrap, topics, schema, tmp_path / "data", tick_seconds=3600,
                     release_linger_s=0, neighbours="add_remove", privacy_unit="user",
                     max_contributions=K)
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        metrics = worker.wait_for(
            lambda m: m.get("dpsynth_watermark", {}).get("0", -1) >= len(pieces) - 1,
            timeout_s=120)
        assert worker.alive, worker.log_tail()
    assert metrics["dpsynth_dead_lettered_messages_total"]["0"] == 3
    synth = OnlineSynthesizer(2, 1.0, bytes.fromhex(TEST_KEY_HEX), 1000, max_depth=12,
                              neighbours="add_remove", privacy_unit="user",
                              max_contributions=K)
    expected = {}
    for chunk in (good[:30], [], [], good[30:], []):  # the worker's own marker may come 5th
        synth.add(np.array([(x, y) for _, x, y in chunk]).reshape(-1, 2),
                  users=[u for u, _, _ in chunk])
        release = synth.step()
        sequence = int(release.metadata["sequence"])
        expected[(0, sequence)] = encode_release(release, run_id="test-run", partition=0,
                                                 sequence=sequence)
    records = read_topic(kafka_bootstrap, topics.output)
    published = {int(r.key.decode().rsplit("/", 1)[1]) for r in records}
    assert {1, 2, 3, 4} <= published <= {1, 2, 3, 4, 5}
    check_against_embedded(records, {k: v for k, v in expected.items() if k[1] in published},
                           "test-run")
