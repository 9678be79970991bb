"""``dpsynth produce`` and ``dpsynth consume`` against a real broker (fixture ``kafka_bootstrap``).

- produce: 5000 generated records, 100 per message, into a fresh topic; read back with the
  test kit's ``read_topic`` (the reader of ``dpsynth topics export``): 50 messages, each a
  msgpack list of 100 maps, 5000 records in all, equal to the generated stream (and
  ``--batch 1`` sends bare maps).
- consume: the test writes encoded releases of an embedded :class:`OnlineSynthesizer` itself
  (two partitions, one release duplicated, one truncated); ``consume`` reports every valid
  release exactly once, rejects the truncated one, and ``--out`` holds the merged points.
"""

from __future__ import annotations

import csv
import re
import uuid
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from click.testing import CliRunner

from dpsynth.cli.consume import consume
from dpsynth.cli.produce import produce
from dpsynth.datasets import drifting_blobs
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import encode_release
from dpsynth.schema import Schema
from dpsynth.stream.codecs import release_record_key
from dpsynth.testing.kafka import create_topics, produce_messages, read_topic

pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.kafka

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "example-schema.json"


def _name(kind: str) -> str:
    return f"dpsynth-it-{kind}-{uuid.uuid4().hex[:10]}"


def _invoke(command: Any, args: list[str]) -> Any:
    result = CliRunner().invoke(command, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


# -- produce ---------------------------------------------------------------------------------


def test_produce_generate_batches_round_trip(kafka_bootstrap: str) -> None:
    topic = _name("raw")
    result = _invoke(produce, ["--bootstrap", kafka_bootstrap, "--topic", topic,
                               "--generate", "5000", "--batch", "100", "--partitions", "2"])
    assert "produced 5,000 records in 50 messages" in result.output
    assert "records/s" in result.output

    messages = read_topic(kafka_bootstrap, topic)
    assert len(messages) == 50  # every message once, nothing else
    assert {m.partition for m in messages} == {0, 1}  # round-robin over both partitions
    assert all(m.key is None for m in messages)
    batches = [msgpack.unpackb(m.value, raw=False) for m in messages]
    assert all(isinstance(b, list) and len(b) == 100 for b in batches)
    assert sum(len(b) for b in batches) == 5000
    # every record arrived once: message i (in partition order) holds records 100i..100i+99
    ordered = sorted(zip(messages, batches, strict=True),
                     key=lambda mb: (mb[0].offset, mb[0].partition))
    records = [r for _, batch in ordered for r in batch]
    expected = drifting_blobs(5000, 0)
    got = np.array([[r["x"], r["y"]] for r in records])
    assert got.shape == (5000, 2)
    assert np.array_equal(got, expected)


def test_produce_single_records_and_schema_units(kafka_bootstrap: str) -> None:
    topic = _name("raw1")
    result = _invoke(produce, ["--bootstrap", kafka_bootstrap, "--topic", topic,
                               "--generate", "30", "--batch", "1", "--schema", str(SCHEMA),
                               "--key-by", "hash", "--partitions", "3"])
    assert "produced 30 records in 30 messages" in result.output
    messages = read_topic(kafka_bootstrap, topic)
    assert len(messages) == 30
    values = [msgpack.unpackb(m.value, raw=False) for m in messages]
    assert all(isinstance(v, dict) and set(v) == {"lat", "lon"} for v in values)
    assert all(len(m.key) == 8 for m in messages)  # keyed by the message index
    assert sorted(int.from_bytes(m.key, "big") for m in messages) == list(range(30))
    # the schema maps the generated points to its units, and back
    schema = Schema.from_json_file(SCHEMA)
    by_index = {int.from_bytes(m.key, "big"): v for m, v in zip(messages, values, strict=True)}
    points, clips = schema.to_unit([by_index[i] for i in range(30)])
    assert clips.total == 0
    np.testing.assert_allclose(points, drifting_blobs(30, 0), atol=1e-12)


def test_produce_input_file_sends_records_as_they_are(kafka_bootstrap: str,
                                                      tmp_path: Path) -> None:
    path = tmp_path / "events.ndjson"
    path.write_text('{"lat": 40.7, "lon": -74.0}\n{"lat": "oops"}\n{"lat": 40.8, "lon": -73.9}\n')
    topic = _name("rawfile")
    result = _invoke(produce, ["--bootstrap", kafka_bootstrap, "--topic", topic,
                               "--input", str(path), "--schema", str(SCHEMA), "--batch", "2"])
    assert "1 of them do not fit --schema" in result.output
    messages = read_topic(kafka_bootstrap, topic)
    batches = [msgpack.unpackb(m.value, raw=False) for m in sorted(messages)]
    assert batches == [[{"lat": 40.7, "lon": -74.0}, {"lat": "oops"}],
                       [{"lat": 40.8, "lon": -73.9}]]


# -- consume ---------------------------------------------------------------------------------

LINE = re.compile(r"^release partition (\d+)  sequence (\d+)  t (\d+)  depth (\d+)  "
                  r"non-empty leaves (\d+)  \(run (\S+)\)$")


def _releases(partition: int, n: int) -> list[Any]:
    """The releases of an embedded synthesizer for one input partition (a release every 500)."""
    synth = OnlineSynthesizer(d=2, epsilon=1.0, key=bytes(range(32)), release_every=500,
                              partition=partition)
    releases = synth.extend(drifting_blobs(n, seed=10 + partition))
    assert [r.metadata["sequence"] for r in releases] == list(range(1, n // 500 + 1))
    return releases


def _encode(release: Any, run_id: str, partition: int) -> tuple[bytes, list[bytes]]:
    sequence = release.metadata["sequence"]
    records = encode_release(release, run_id=run_id, partition=partition, sequence=sequence,
                             max_chunk_bytes=600)  # small chunks: several per release
    return release_record_key(run_id, partition, sequence), records


@pytest.fixture(scope="module")
def synthetic_topic(kafka_bootstrap: str) -> dict[str, Any]:
    """A synthetic topic holding two partitions' releases, one duplicated, two broken.

    Input partition 0: releases 1-5, with release 2 sent twice (whole, byte-identical) and
    release 4 missing a middle chunk (its end record arrives: corrupt). Input partition 1:
    releases 1-3 whole and release 4 cut after its first chunk (no end record: truncated).
    """
    run_id = f"it-{uuid.uuid4().hex[:8]}"
    topic = _name("synthetic")
    create_topics(kafka_bootstrap, {topic: 2})
    p0, p1 = _releases(0, 2500), _releases(1, 2000)
    messages: list[tuple[bytes, bytes]] = []
    for release in p0:
        key, records = _encode(release, run_id, 0)
        sequence = release.metadata["sequence"]
        if sequence == 4:
            assert len(records) >= 4  # header, >= 2 chunks, end
            records = records[:1] + records[2:]  # chunk 0 lost, end record kept
        messages += [(key, r) for r in records]
        if sequence == 3:  # the retry of release 2, after release 3
            key2, records2 = _encode(p0[1], run_id, 0)
            messages += [(key2, r) for r in records2]
    for release in p1:
        key, records = _encode(release, run_id, 1)
        if release.metadata["sequence"] == 4:
            assert len(records) >= 3
            records = records[:2]  # header and chunk 0; the rest never arrives
        messages += [(key, r) for r in records]
    produce_messages(kafka_bootstrap, topic, [(None, v, k) for k, v in messages])
    valid = {(0, r.metadata["sequence"]): r for r in p0 if r.metadata["sequence"] != 4}
    valid |= {(1, r.metadata["sequence"]): r for r in p1 if r.metadata["sequence"] != 4}
    return {"topic": topic, "run_id": run_id, "valid": valid,
            "latest": [p0[4], p1[2]], "records": len(messages)}


def test_consume_reports_valid_releases_once_and_rejects_broken(
    kafka_bootstrap: str, synthetic_topic: dict[str, Any], tmp_path: Path
) -> None:
    topic, run_id, valid = (synthetic_topic[k] for k in ("topic", "run_id", "valid"))
    out = tmp_path / "merged"
    result = CliRunner().invoke(
        consume, ["--bootstrap", kafka_bootstrap, "--topic", topic, "--from-beginning",
                  "--timeout", "5", "--out", str(out), "--schema", str(SCHEMA)],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = [LINE.match(line) for line in result.stdout.splitlines()]
    reported = [m.groups() for m in lines if m is not None]
    keys = [(int(p), int(s)) for p, s, *_ in reported]
    assert len(keys) == len(set(keys)), f"a release was reported twice: {keys}"
    assert sorted(keys) == sorted(valid)  # the duplicate once, the broken two never
    for p, s, t, depth, leaves, run in reported:
        release = valid[(int(p), int(s))]
        assert (int(t), int(depth), run) == (release.t, release.depth, run_id)
        assert int(leaves) == int(np.count_nonzero(release.leaf_counts))
    assert f"{len(valid)} releases, 2 rejected (incomplete or corrupt), " \
           f"{synthetic_topic['records']} records read" in result.stdout
    assert "incomplete at exit" in result.output  # the truncated release, by key
    assert f"('{run_id}', 1, 4)" in result.output

    # the merged dataset: partition 0's release 5 and partition 1's release 3, original units
    latest = synthetic_topic["latest"]
    total = sum(r.t for r in latest)
    assert f"merged dataset: {total} points from 2 partitions" in result.stdout
    schema = Schema.from_json_file(SCHEMA)
    with open(out / "merged.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == list(schema.names)
    merged = np.array(rows[1:], dtype=float)
    expected = schema.from_unit(np.vstack([r.points for r in latest]))
    np.testing.assert_allclose(merged, expected, rtol=0, atol=1e-9)
    described = (out / "releases.json").read_text()
    assert '"sequence": 5' in described and '"sequence": 3' in described


def test_consume_max_releases_and_run_filter(
    kafka_bootstrap: str, synthetic_topic: dict[str, Any]
) -> None:
    topic = synthetic_topic["topic"]
    result = _invoke(consume, ["--bootstrap", kafka_bootstrap, "--topic", topic,
                               "--from-beginning", "--max-releases", "2", "--timeout", "30"])
    assert sum(1 for line in result.stdout.splitlines() if LINE.match(line)) == 2
    other = _invoke(consume, ["--bootstrap", kafka_bootstrap, "--topic", topic,
                              "--from-beginning", "--timeout", "3", "--run-id", "another-run"])
    assert not any(LINE.match(line) for line in other.stdout.splitlines())
    assert "merged dataset: 0 points from 0 partitions" in other.stdout


def test_consume_missing_topic_fails_cleanly(kafka_bootstrap: str) -> None:
    result = CliRunner().invoke(consume, ["--bootstrap", kafka_bootstrap, "--topic",
                                          _name("absent"), "--timeout", "1"])
    assert result.exit_code == 1
    assert "does not exist" in result.output
