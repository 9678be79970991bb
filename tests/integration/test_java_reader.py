"""The JVM reader (clients/java) on a topic the worker wrote: the same points as dpsynth.client.

The worker publishes 60 releases (2 input partitions × 30) to a 2-partition synthetic topic on
the test broker; the Java command-line example prints the latest release of every partition as
CSV in the schema's units, and every value must equal, bit for bit, Python's
``Schema.from_unit(Release.points)`` of the release ``ReleaseConsumer`` kept. The same again
from the latest view (``--latest-view``: the compacted topic of each partition's newest
release), which both readers read too. The jar is built with Maven when it is missing or older
than its sources (``make java-test`` builds it first); the test is skipped only when ``java`` or
``mvn`` is not installed.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
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
    records_of,
    unique_topics,
    worker_env,
)

pytestmark = pytest.mark.kafka

JAVA_DIR = Path(__file__).resolve().parents[2] / "clients" / "java"
JAR = JAVA_DIR / "target" / "dpsynth-reader.jar"
SCHEMA = {"version": 1, "columns": [{"name": "lon", "lower": -74.3, "upper": -73.7},
                                    {"name": "lat", "lower": 40.5, "upper": 40.95}]}
PER_PARTITION, RELEASE_EVERY, PER_MESSAGE = 3000, 100, 100


@pytest.fixture(scope="module")
def java_command() -> list[str]:
    """``java -jar`` of the reader, its jar built (tests skipped) when missing or older than
    its sources."""
    tools = {tool: shutil.which(tool) for tool in ("java", "mvn")}
    missing = [tool for tool, path in tools.items() if path is None]
    if missing:
        pytest.skip(f"the JVM reader needs {' and '.join(missing)} (Java 17 and Maven)")
    sources = [JAVA_DIR / "pom.xml", *(JAVA_DIR / "src" / "main").rglob("*.java")]
    newest = max(p.stat().st_mtime for p in sources)
    if not JAR.exists() or JAR.stat().st_mtime < newest or not (JAR.parent / "lib").is_dir():
        subprocess.run([str(tools["mvn"]), "-B", "-q", "-DskipTests", "package"],  # noqa: S603
                       cwd=JAVA_DIR, check=True, timeout=900)
    return [str(tools["java"]), "-jar", str(JAR)]


def test_java_csv_equals_python_points_bit_for_bit(kafka_bootstrap, tmp_path, java_command):
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    schema = Schema.from_dict(SCHEMA)
    rng = np.random.default_rng(30)  # public test data
    topics = unique_topics("java-reader")
    create_topics(kafka_bootstrap, {topics.input: 2, topics.output: 2, topics.dead_letter: 1})
    produce_messages(kafka_bootstrap, topics.input, (
        (p, encode_records(records_of(
            schema.from_unit(rng.random((PER_MESSAGE, 2))), names=("lon", "lat"))))
        for _ in range(PER_PARTITION // PER_MESSAGE) for p in (0, 1)))
    env = worker_env(kafka_bootstrap, topics, schema_file, tmp_path / "data",
                     release_every=RELEASE_EVERY, tick_seconds=0, max_depth=10)
    releases = PER_PARTITION // RELEASE_EVERY
    with WorkerProcess(env, tmp_path / "worker.log") as worker:
        worker.wait_for(lambda m: all(
            m.get("dpsynth_releases_total", {}).get(p) == releases for p in ("0", "1")),
            timeout_s=180)

    with ReleaseConsumer(kafka_bootstrap, topics.output, run_id="test-run") as consumer:
        events = consumer.read_to_end(timeout_s=60)
        assert len(events) == 2 * releases >= 50
        assert consumer.rejected == 0
        latest = {p: (key.sequence, schema.from_unit(release.points))
                  for (_, p), (key, release) in consumer.latest.items()}
    assert {p: s for p, (s, _) in latest.items()} == {0: releases, 1: releases}

    with ReleaseConsumer(kafka_bootstrap, topics.output, run_id="test-run",
                         latest_view=True) as consumer:
        consumer.read_to_end(timeout_s=60)
        assert {p: key.sequence for (_, p), (key, _) in consumer.latest.items()} == {
            0: releases, 1: releases}  # the worker's stop wrote its newest releases there
        assert consumer.tracker.records < 2 * releases * 3  # far fewer than the history's

    for view in ([], ["--latest-view"]):
        run = subprocess.run(  # noqa: S603 - our own jar
            [*java_command, "--bootstrap", kafka_bootstrap, "--topic", topics.output,
             "--run-id", "test-run", "--schema", str(schema_file), *view],
            capture_output=True, text=True, timeout=120, check=False)
        assert run.returncode == 0, run.stderr
        _check_csv(run, latest)


def _check_csv(run: subprocess.CompletedProcess[str], latest: dict) -> None:
    """The Java reader's CSV: every partition's latest release, bit for bit Python's."""
    assert "0 releases refused" in run.stderr, run.stderr
    rows = list(csv.reader(io.StringIO(run.stdout)))
    assert rows[0] == ["run_id", "partition", "sequence", "lon", "lat"]
    for p, (sequence, points) in latest.items():
        mine = [r for r in rows[1:] if r[1] == str(p)]
        assert {(r[0], r[2]) for r in mine} == {("test-run", str(sequence))}
        java = np.array([[float(v) for v in r[3:]] for r in mine])
        assert java.shape == points.shape == (PER_PARTITION, 2)
        assert np.array_equal(java.view(np.uint64), points.view(np.uint64)), (
            f"partition {p}: Java and Python points differ")
