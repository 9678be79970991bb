"""The worker's materialised points (DPSYNTH_POINTS_FORMAT=arrow) on a real broker.

The worker publishes 8 releases (2 input partitions × 4) with their points beside them, in
chunks of at most 4096 bytes. A reader that knows nothing of dpsynth (examples/points/
read_points.py: pyarrow and confluent-kafka) assembles every release's points, and they equal,
bit for bit, ``Schema.from_unit(Release.points)`` of the release dpsynth.client read from the
synthetic topic; the script's CSV of the latest releases runs without importing dpsynth.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dpsynth.client.consumer import ReleaseConsumer
from dpsynth.schema import Schema
from dpsynth.testing.kafka import (
    WorkerProcess,
    create_topics,
    encode_records,
    produce_messages,
    read_topic,
    records_of,
    unique_topics,
    worker_env,
)

pytestmark = pytest.mark.kafka

READER = Path(__file__).resolve().parents[2] / "examples" / "points" / "read_points.py"
SCHEMA = {"version": 1, "columns": [{"name": "lon", "lower": -74.3, "upper": -73.7},
                                    {"name": "lat", "lower": 40.5, "upper": 40.95}]}
PER_PARTITION, RELEASE_EVERY, PER_MESSAGE, MAX_RECORD = 2000, 500, 100, 4096
#: The script as a team runs it, then a check that nothing of dpsynth was imported.
RUN_ALONE = ("import runpy, sys; sys.argv = sys.argv[1:]; "
             "runpy.run_path(sys.argv[0], run_name='__main__'); "
             "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'dpsynth'); "
             "assert not loaded, loaded")


def _reader():
    spec = importlib.util.spec_from_file_location("read_points", READER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_plain_reader_gets_every_release_points_in_units(kafka_bootstrap, tmp_path):
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    schema = Schema.from_dict(SCHEMA)
    rng = np.random.default_rng(31)  # public test data
    topics = unique_topics("points")
    points_topic = f"{topics.output}-points"
    create_topics(kafka_bootstrap, {topics.input: 2, topics.output: 2, topics.dead_letter: 1,
                                    points_topic: 2})
    produce_messages(kafka_bootstrap, topics.input, (
        (p, encode_records(records_of(
            schema.from_unit(rng.random((PER_MESSAGE, 2)) ** 2), names=("lon", "lat"))))
        for _ in range(PER_PARTITION // PER_MESSAGE) for p in (0, 1)))
    env = worker_env(kafka_bootstrap, topics, schema_file, tmp_path / "data",
                     release_every=RELEASE_EVERY, tick_seconds=0, max_depth=10,
                     points_format="arrow", points_topic=points_topic,
                     release_max_record_bytes=MAX_RECORD)
    releases = PER_PARTITION // RELEASE_EVERY
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        metrics = worker.wait_for(lambda m: all(
            m.get("dpsynth_releases_total", {}).get(p) == releases for p in ("0", "1")),
            timeout_s=180)
    assert metrics["dpsynth_points_records_total"]["0"] > releases  # chunked

    with ReleaseConsumer(kafka_bootstrap, topics.output, run_id="test-run") as consumer:
        events = consumer.read_to_end(timeout_s=60)
    expected = {(e.key.run_id, e.key.partition, e.key.sequence):
                schema.from_unit(e.release.points) for e in events}
    assert len(expected) == 2 * releases

    records = read_topic(kafka_bootstrap, points_topic)
    assert all(len(r.value) <= MAX_RECORD for r in records)
    assert {r.key for r in records} == {f"{r}/{p}/{s}".encode() for r, p, s in expected}
    assembler = _reader().PointsAssembler()
    got = {}
    for value in [r.value for r in records] * 2:  # every record twice: duplicates dropped
        done = assembler.add(value)
        if done is not None:
            description, rows = done
            identity = (description["run_id"], description["partition"],
                        description["sequence"])
            assert identity not in got
            got[identity] = np.column_stack([rows.column(n).to_numpy() for n in ("lon", "lat")])
    assert sorted(got) == sorted(expected)
    for identity, points in expected.items():
        assert np.array_equal(got[identity].view(np.uint64), points.view(np.uint64)), identity

    run = subprocess.run(  # noqa: S603 - our interpreter, the example script
        [sys.executable, "-c", RUN_ALONE, str(READER), "--bootstrap", kafka_bootstrap,
         "--topic", points_topic], capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    rows = list(csv.reader(io.StringIO(run.stdout)))
    assert rows[0] == ["run_id", "partition", "sequence", "lon", "lat"]
    for p in (0, 1):
        mine = np.array([[float(v) for v in r[3:]] for r in rows[1:] if r[1] == str(p)])
        latest = expected[("test-run", p, releases)]
        assert np.array_equal(mine.view(np.uint64), latest.view(np.uint64)), p
