"""No raw value and no key material in what the worker publishes (issue 44), byte for byte.

One worker (privacy unit "user", the schema's ``uid`` column; ``DPSYNTH_POINTS_FORMAT=arrow``;
the latest view written with every release) reads 300 msgpack records from one input partition,
a tenth of them the user "zq-sentinel-7781" at the coordinates 0.1234567891234 and
0.8765432198765 (schema bounds [-2, 3] × [-1, 4], so they map to other values in [0,1]),
another tenth other users at the same coordinates; it publishes a release every 100 records.
Every byte (keys, values, headers) of the synthetic topic, the latest-view topic and the points
topic, and every HTTP answer of ``dpsynth view --bootstrap --topic`` on the synthetic topic, is
searched for each value in each encoding of :mod:`tests.support.rawscan` (float64 in both byte
orders, msgpack's float 64 as the input used it, the decimal texts, each raw and mapped to
[0,1]; the id's UTF-8 and keyed hash; the key raw and in hex, the user-id hash's subkey): none
is found. Not scanned: the raw-events, dead-letter and state topics and the data directory,
which hold raw data (docs/privacy.md "What neither notion covers"). The scan is not vacuous:
every release is there and the bytes scanned are counted; the same scanner finds the values
in the raw-events topic (msgpack float 64 and UTF-8, as produced), the user's keyed hash in the
state topic (the changelog of its per-user counts), and every needle planted in a real
release record.

Deterministic (fixed key, fixed input, releases at fixed counts): the outcome is the same on
every run; a chance match is ≤ 1e-9 (10 significant digits of a float as text).
"""

from __future__ import annotations

import hashlib
import json

import msgpack
import pytest

from dpsynth.client.consumer import latest_view_topic
from dpsynth.schema import Schema
from dpsynth.testing.kafka import (
    WorkerProcess,
    create_topics,
    produce_messages,
    read_topic,
    unique_topics,
    worker_env,
)
from tests.support.rawscan import (
    SENTINEL_SCHEMA,
    SENTINEL_USER,
    SENTINEL_X_TEXT,
    SENTINEL_Y_TEXT,
    Scan,
    assert_planted_found,
    sentinel_needles,
    sentinel_rows,
    view_answers,
)

pytestmark = pytest.mark.kafka

#: A fixed test key (never a constant key in production). Never printed: hits name it only.
KEY = hashlib.sha256(b"dpsynth issue 44: the raw-byte scan of the worker").digest()
ROWS, EVERY, RELEASE_EVERY = 300, 10, 100


def _scan_topic(scan: Scan, bootstrap: str, topic: str, label: str) -> int:
    """Every key, value and header of ``topic`` into ``scan``; the number of records."""
    records = read_topic(bootstrap, topic)
    for r in records:
        where = f"{label} p{r.partition}@{r.offset}"
        scan.add(f"{where} key", r.key)
        scan.add(f"{where} value", r.value)
        for name, value in r.headers:
            scan.add(f"{where} header {name}", name.encode() + b"=" + (value or b""))
    return len(records)


def test_no_raw_value_or_key_byte_reaches_the_worker_topics_or_the_view(kafka_bootstrap,
                                                                         tmp_path):
    schema = Schema.from_dict(SENTINEL_SCHEMA)
    needles = sentinel_needles(schema, {"x": SENTINEL_X_TEXT, "y": SENTINEL_Y_TEXT},
                               user=SENTINEL_USER, key=KEY)
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SENTINEL_SCHEMA))
    topics = unique_topics("rawscan")
    points, latest = f"{topics.output}-points", latest_view_topic(topics.output)
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1,
                                    points: 1, latest: 1})
    rows = sentinel_rows(ROWS, EVERY, 44, schema)
    produce_messages(kafka_bootstrap, topics.input, (
        (0, msgpack.packb({"uid": u, "x": float(x), "y": float(y)}), u.encode())
        for u, x, y in rows))
    env = worker_env(kafka_bootstrap, topics, schema_file, tmp_path / "data",
                     noise_key=KEY.hex(), release_every=RELEASE_EVERY, tick_seconds=0,
                     release_linger_s=0, latest_interval_s=0, privacy_unit="user",
                     max_contributions=2 * ROWS // EVERY, points_format="arrow",
                     points_topic=points)
    releases = ROWS // RELEASE_EVERY
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        metrics = worker.wait_for(
            lambda m: m.get("dpsynth_releases_total", {}).get("0") == releases, timeout_s=120)
        assert not metrics.get("dpsynth_dead_lettered_messages_total", {}).get("0")
        answers = view_answers(
            ["--bootstrap", kafka_bootstrap, "--topic", topics.output, "--schema",
             str(schema_file)],
            lambda state: any(p["sequence"] == releases
                              for p in state["partitions"]))
        worker.wait_for(  # the latest view of the last release is committed
            lambda m: m.get("dpsynth_latest_view_writes_total", {}).get("0", 0) >= 1)

    scan = Scan(needles)
    counts = {label: _scan_topic(scan, kafka_bootstrap, topic, label)
              for label, topic in (("synthetic topic", topics.output),
                                   ("latest-view topic", latest), ("points topic", points))}
    assert counts["synthetic topic"] >= 2 * releases, counts  # header and end, at least
    assert counts["latest-view topic"] >= 2 and counts["points topic"] >= releases, counts
    for where, answer in answers.items():
        scan.add(f"dpsynth view --topic: {where}", answer)
    scan.assert_clean(min_bytes=10_000)

    # the scanner can fail: the raw-events topic holds the values as produced, the state
    # topic the sentinel user's keyed hash, and every needle planted in a real release
    # record is found where it was planted
    raw = Scan(needles)
    _scan_topic(raw, kafka_bootstrap, topics.input, "raw-events topic")
    assert {"x (input units) as msgpack float 64", "y (input units) as msgpack float 64",
            "x (input units) as float64 big-endian", "the user id as UTF-8"} <= raw.found()
    state = Scan(needles)
    _scan_topic(state, kafka_bootstrap, f"{topics.input}-group-state", "state topic")
    assert "the user id's keyed hash, big-endian hex" in state.found()  # its counts' key
    assert_planted_found(needles, read_topic(kafka_bootstrap, topics.output)[-1].value or b"")
