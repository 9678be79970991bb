"""The image (deploy/Dockerfile, ``make image``) as a platform team runs it, against a real broker.

Containers of the image, with ``--network=host``, the key as a file secret and a data volume
each, consume topics of the session's broker (the pytest plugin's local KRaft broker) and must
publish what the embedded engine makes from the same points with the same key, byte for byte:

- ``podman kill -s KILL`` of a container while records arrive, then a new container on the same
  volume (a pod's restart): every release present, none assembled twice by the consumer library,
  every copy on the topic byte-identical, and a plain read_committed consumer sees no record
  twice (releases, dead letters and input offsets are committed in one Kafka transaction);
- a second container joins and leaves (scale 1 → 2 → 1): the joining container restores the
  partition it gets from the state topic (not by replaying the input), every partition's
  releases equal its embedded run, nothing lost;
- docker-compose.yml's own worker service (its settings, the key as a compose file secret, the
  image's data volume), run by podman-compose on the host's network against the local broker.

Runs where a container engine and the image of this checkout are present (``make image``); skips
naming the packages otherwise, or fails with ``DPSYNTH_IMAGE_REQUIRED=1`` (CI, ``make image-test``).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml

from dpsynth.client.consumer import ReleaseConsumer
from dpsynth.schema import Schema
from dpsynth.testing.kafka import (
    TEST_KEY_HEX,
    WorkerProcess,
    create_topics,
    encode_records,
    free_port,
    produce_messages,
    read_topic,
    records_of,
    unique_topics,
    worker_env,
    write_schema,
)
from tests.support.containers import (
    ENV_REQUIRED,
    IMAGE_UID,
    ROOT,
    ContainerWorker,
    compose_command,
    container_files,
    engine,
    engine_env,
    image_name,
    image_problem,
    remove_compose_project,
    run_engine,
)
from tests.support.embedded import check_against_embedded, embedded_release_records
from tests.support.feeder import Feeder
from tests.support.markers import embedded_points_from_input, input_values

pytestmark = pytest.mark.image

RELEASE_EVERY = 1000
MAX_DEPTH = 12  # worker_env's
WAIT_S = 240  # hang guard of every wait: a container's start on a loaded 2-core machine


@pytest.fixture(scope="module")
def image_engine() -> str:
    """The engine that runs the image of this checkout, or skip (fail under CI) saying why."""
    name = engine()
    problem = image_problem(name)
    if problem is not None:
        if os.environ.get(ENV_REQUIRED, "").strip() not in ("", "0"):
            pytest.fail(f"{problem} ({ENV_REQUIRED} is set)")
        pytest.skip(problem)
    assert name is not None
    return name


def _name(prefix: str) -> str:
    return f"dpsynth-test-{prefix}-{uuid.uuid4().hex[:8]}"


def _t(worker: ContainerWorker, partition: int) -> float:
    return worker.metrics().get("dpsynth_t", {}).get(str(partition), -1)


def _wait(done: Callable[[], bool], workers: list[ContainerWorker], what: str) -> None:
    """Until ``done()``; raise with the containers' logs when one of ``workers`` exits or
    after :data:`WAIT_S`."""
    deadline = time.monotonic() + WAIT_S
    while not done():
        exited = [w.name for w in workers if not w.alive]
        if exited or time.monotonic() > deadline:
            tails = "\n----\n".join(w.log_tail(25) for w in workers)
            why = f"{exited} exited" if exited else f"not reached in {WAIT_S} s"
            raise RuntimeError(f"{what}: {why}:\n{tails}")
        time.sleep(0.3)


def _wait_metrics(worker: WorkerProcess, predicate: Callable[[dict], bool], what: str) -> None:
    """Until the worker's /metrics satisfy ``predicate`` (a container not started here)."""
    deadline = time.monotonic() + WAIT_S
    while not predicate(worker.metrics()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached in {WAIT_S} s")
        time.sleep(0.3)


def _consumer_library_releases(bootstrap: str, topic: str) -> list[tuple[int, int]]:
    """(partition, sequence) of every release dpsynth.client yields, in order."""
    with ReleaseConsumer(bootstrap, topic, run_id="test-run") as consumer:
        return [(e.key.partition, e.key.sequence) for e in consumer.releases(idle_s=3)]


def test_the_image_holds_no_build_secret_and_runs_unprivileged(image_engine):
    # The host's pip settings and CA bundle were build-time secret mounts: nothing of them may
    # be left in a layer of the image.
    probe = run_engine(image_engine, "run", "--rm", "--network=none", image_name(), "sh", "-c",
                       "id -u; env | grep -c '^PIP_CONFIG_FILE=\\|^PIP_CERT=' || true; "
                       "find / -xdev \\( -name pip-conf -o -name pip-ca -o -name pip.conf \\) "
                       "-print 2>/dev/null; true")  # (unreadable folders: not the user's)
    uid, pip_variables, *found = probe.stdout.split()
    assert uid == "10001"
    assert pip_variables == "0"
    assert found == []


@pytest.mark.kafka
def test_a_container_killed_with_sigkill_and_restarted_loses_and_repeats_nothing(
        image_engine, kafka_bootstrap, tmp_path, record_property):
    n = 8000
    points = np.random.default_rng(29).random((n, 2))
    topics = unique_topics("image-kill")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    schema = write_schema(tmp_path / "schema.json")
    env = worker_env(kafka_bootstrap, topics, schema, Path("/data"), tick_seconds=0)
    files = container_files(tmp_path / "worker-0", schema)
    name, log = _name("kill"), tmp_path / "worker-0.log"

    worker = ContainerWorker(image_engine, name, env, files, log).start()
    try:
        _wait(lambda: _t(worker, 0) >= 0, [worker], "partition 0 assigned")
        with Feeder(kafka_bootstrap, topics.input, points, per_message=20) as feeder:
            _wait(lambda: _t(worker, 0) >= 2000, [worker], "2000 records counted")
            worker.kill()  # podman kill -s KILL, while records keep arriving
            killed_at = feeder.sent
            assert not worker.alive
            worker.stop()  # closes its log, removes what is left of the container
            worker = ContainerWorker(image_engine, name, env, files, log).start()  # the restart
            _wait(lambda: feeder.done, [worker], "every record sent")
        _wait(lambda: worker.metrics().get("dpsynth_watermark", {}).get("0") == n // 20 - 1,
              [worker], "every input message committed")
        assert _t(worker, 0) == n  # none lost, none counted twice
    finally:
        worker.stop()

    expected = embedded_release_records(points, epsilon=1.0, release_every=RELEASE_EVERY,
                                        max_depth=MAX_DEPTH, run_id="test-run", partition=0)
    stats = check_against_embedded(read_topic(kafka_bootstrap, topics.output),
                                   {(0, s): r for s, r in expected.items()}, "test-run")
    assert stats["releases"] == n // RELEASE_EVERY
    seen = _consumer_library_releases(kafka_bootstrap, topics.output)
    assert sorted(seen) == sorted((0, s) for s in expected)  # 0 lost, 0 duplicated
    record_property("raw_duplicate_records", stats["duplicates"])
    print(f"\nkill -9 of the container after {killed_at} of {n} records sent: "
          f"{stats['records']} records on the synthetic topic, {stats['duplicates']} of them "
          "raw duplicates a plain read_committed consumer sees; "
          f"{len(seen)} releases from dpsynth.client, 0 lost, 0 duplicated")
    assert stats["duplicates"] == 0  # transactions: a plain consumer sees each record once


@pytest.mark.kafka
def test_a_second_container_joins_and_leaves_and_nothing_is_lost(
        image_engine, kafka_bootstrap, tmp_path):
    rng = np.random.default_rng(30)
    points = {0: rng.random((8000, 2)), 1: rng.random((8000, 2)) ** 2}
    per_message = 100
    topics = unique_topics("image-scale")
    create_topics(kafka_bootstrap, {topics.input: 2, topics.output: 2, topics.dead_letter: 1})
    schema = write_schema(tmp_path / "schema.json")
    env = worker_env(kafka_bootstrap, topics, schema, Path("/data"), tick_seconds=0)
    prefix = _name("scale")
    a = ContainerWorker(image_engine, f"{prefix}-0", env,
                        container_files(tmp_path / "worker-0", schema), tmp_path / "worker-0.log")
    b = ContainerWorker(image_engine, f"{prefix}-1",
                        {**env, "DPSYNTH_WEB_PORT": str(free_port())},
                        container_files(tmp_path / "worker-1", schema), tmp_path / "worker-1.log")

    def produce(start: int, end: int) -> None:
        produce_messages(kafka_bootstrap, topics.input, [
            (p, encode_records(records_of(points[p][i:i + per_message])))
            for p in (0, 1) for i in range(start, end, per_message)])

    def done(workers: list[ContainerWorker], upto: int) -> Callable[[], bool]:
        def check() -> bool:  # both partitions at t = upto, on whichever container owns them
            best = {p: max((_t(w, p) for w in workers if w.alive), default=-1) for p in (0, 1)}
            return best == {0: upto, 1: upto}
        return check

    try:
        a.start()
        produce(0, 3000)
        _wait(done([a], 3000), [a], "3000 records per partition on one container")

        b.start()  # scale 1 -> 2: one partition moves to B, which has no state for it
        _wait(lambda: len(b.metrics().get("dpsynth_t", {})) == 1, [a, b], "B owns a partition")
        produce(3000, 6000)
        _wait(done([a, b], 6000), [a, b], "6000 records per partition on two containers")
        moved = next(iter(b.metrics()["dpsynth_t"]))

        b.stop()  # scale 2 -> 1: podman stop (SIGTERM); A takes the partition back
        produce(6000, 8000)
        _wait(done([a], 8000), [a], "8000 records per partition on one container again")
    finally:
        a.stop()
        b.stop()
    b_log = b.log_path.read_text()
    assert f"partition {moved}: state restored from the state topic" in b_log  # not by replay
    assert "replaying offsets [0, " not in b_log
    assert f"partition {moved}: the first input offset delivered" in a.log_path.read_text()

    expected = {}
    for p in (0, 1):
        per_sequence = embedded_release_records(
            points[p], epsilon=1.0, release_every=RELEASE_EVERY, max_depth=MAX_DEPTH,
            run_id="test-run", partition=p)
        expected.update({(p, s): r for s, r in per_sequence.items()})
    stats = check_against_embedded(read_topic(kafka_bootstrap, topics.output), expected,
                                   "test-run")
    assert stats["releases"] == 16
    seen = _consumer_library_releases(kafka_bootstrap, topics.output)
    assert sorted(seen) == sorted(expected)


@pytest.mark.kafka
def test_the_compose_files_worker_publishes_the_embedded_runs_releases(
        image_engine, kafka_bootstrap, tmp_path):
    compose = compose_command(image_engine)
    if compose is None:
        pytest.skip(f"no compose tool for {image_engine}: podman-compose >= 1.6 (the dev extra; "
                    "Debian's 1.0.3 cannot run a service on the host's network) or docker compose")
    worker = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["worker"]
    settings = worker["environment"]
    topics = unique_topics("image-compose")
    create_topics(kafka_bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    port = free_port()
    # What the test changes: where the broker and the topics are (the host's network: the local
    # broker listens on 127.0.0.1), and no wall-clock tick markers (releases every
    # DPSYNTH_RELEASE_EVERY records only, so the embedded run is known in advance).
    override = tmp_path / "override.yml"
    override.write_text(yaml.safe_dump({"services": {"worker": {
        "network_mode": "host",
        "environment": {
            "DPSYNTH_BROKER": kafka_bootstrap, "DPSYNTH_INPUT_TOPIC": topics.input,
            "DPSYNTH_OUTPUT_TOPIC": topics.output, "DPSYNTH_DEAD_LETTER_TOPIC": topics.dead_letter,
            "DPSYNTH_GROUP_ID": f"{topics.input}-group", "DPSYNTH_WEB_PORT": str(port),
            "DPSYNTH_WEB_BIND": "127.0.0.1", "DPSYNTH_TICK_SECONDS": "0"}}}}))
    key = tmp_path / "noise-key"  # the compose file secret, readable by the image's user only
    key.write_text(TEST_KEY_HEX)
    if os.geteuid() == 0:
        os.chown(key, IMAGE_UID, IMAGE_UID)
    key.chmod(0o400 if os.geteuid() == 0 else 0o444)
    files, project = [str(ROOT / "docker-compose.yml"), str(override)], _name("compose")
    up = [*compose, "-p", project, *[a for f in files for a in ("-f", f)],
          "up", "-d", "--no-deps", "--no-build", "worker"]
    schema = Schema.from_json_file(ROOT / "schemas" / "example-schema.json")
    n, per_message = 3000, 100
    unit = np.random.default_rng(31).random((n, 2))
    lows = np.array([c.lower for c in schema.columns])
    highs = np.array([c.upper for c in schema.columns])
    points = lows + unit * (highs - lows)
    # reads the compose worker's /metrics (a process handle never started: compose runs it)
    probe = WorkerProcess({"DPSYNTH_WEB_PORT": str(port)}, tmp_path / "unused.log")
    try:
        started = subprocess.run(  # noqa: S603 - the compose tool, our arguments
            up, capture_output=True, text=True, timeout=300, check=False,
            env={**engine_env(), "DPSYNTH_NOISE_KEY_PATH": str(key)})
        assert started.returncode == 0, started.stdout + started.stderr
        _wait_metrics(probe, lambda m: "0" in m.get("dpsynth_t", {}), "partition 0 assigned")
        produce_messages(kafka_bootstrap, topics.input, [
            (0, encode_records(records_of(points[i:i + per_message], names=("lat", "lon"))))
            for i in range(0, n, per_message)])
        last = n // per_message - 1
        _wait_metrics(probe, lambda m: m.get("dpsynth_watermark", {}).get("0") == last,
                      "every input message committed")
    finally:
        remove_compose_project(image_engine, compose, files, project)

    expected = embedded_points_from_input(
        input_values(kafka_bootstrap, topics.input), schema,
        epsilon=float(settings["DPSYNTH_EPSILON"]),
        release_every=int(settings["DPSYNTH_RELEASE_EVERY"]),
        max_depth=int(settings["DPSYNTH_MAX_DEPTH"]), run_id=settings["DPSYNTH_RUN_ID"])
    assert len(expected) == n // int(settings["DPSYNTH_RELEASE_EVERY"])
    check_against_embedded(read_topic(kafka_bootstrap, topics.output),
                           {(0, s): r for s, r in expected.items()}, settings["DPSYNTH_RUN_ID"])
    left = run_engine(image_engine, "ps", "-a", "-q", "--filter",
                      f"label=com.docker.compose.project={project}").stdout.split()
    assert left == []
