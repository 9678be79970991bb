"""Start-up and recovery of the worker: ready after a restart, kill -9 → first record, SIGTERM.

``python -m benchmarks recovery [--kills 10] [--restarts 10]`` measures, on one broker, in one run:

1. **Ready after a restart with local state**: a worker (a static member) that processed records
   gets SIGTERM and a new process starts on the same data directory; from the launch to
   ``/readyz`` answering 200 (partitions assigned, their state loaded), ``--restarts`` times;
   beside it the seconds the start-up log gives for the ``ready`` phase, the **SIGTERM drain**
   (SIGTERM → exit: the batch finished, output and offsets committed) and the time a bare
   confluent-kafka consumer takes to join the same broker (the baseline of the same run: ratio).
2. **kill -9, restarted in place** (a pod restarted with the same ``group.instance.id``): a
   producer keeps sending one 10-record message every 20 ms; SIGKILL, a new process at once;
   from the kill to the new process's first processed record (``dpsynth_records_in_total`` > 0).
   At the end every release is checked byte-identical to the embedded synthesizer's.
3. **kill -9 of a static member that does not come back** (a scale-down, a lost node): two
   static members share a two-partition topic; one is killed and not restarted; from the kill to
   the first record of its partition processed by the survivor (which waits for the dead
   member's session timeout, ``DPSYNTH_SESSION_TIMEOUT_S``, then a rebalance and a replay of
   what the dead member had not committed). The killed member is then restarted and the group
   settles before the next kill.

Each as a distribution (median, p95, max). Numbers: docs/benchmarks.md "Kafka worker"; the
session-timeout trade-off: docs/operator.md "Recovery after kill -9".

These were wall-clock assertions in the test suite; timings belong here.
"""

from __future__ import annotations

import os
import re
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import click
import numpy as np

from benchmarks.kafka import DEFAULT_KAFKA_DIR, bench_broker
from dpsynth.testing.kafka import (
    WorkerProcess,
    create_topics,
    read_topic,
    unique_topics,
    worker_env,
    write_schema,
)
from tests.support.feeder import Feeder


def first_record_after(worker: WorkerProcess, timeout_s: float, partition: str = "0") -> float:
    """Monotonic time at which the worker's /metrics first shows a processed record of
    ``partition`` (its series starts when the partition is assigned)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if worker.metrics().get("dpsynth_records_in_total", {}).get(partition, 0) > 0:
            return time.monotonic()
        if not worker.alive:
            raise RuntimeError(f"worker exited:\n{worker.log_tail()}")
        time.sleep(0.02)
    raise TimeoutError(f"no record processed in {timeout_s} s:\n{worker.log_tail()}")


def bare_join_seconds(bootstrap: str, topic: str) -> float:
    """A bare confluent-kafka consumer: subscribe → first message (the baseline)."""
    from confluent_kafka import Consumer

    start = time.monotonic()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bare-{time.time_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        while True:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                return time.monotonic() - start
    finally:
        consumer.close()


def distribution(seconds: list[float]) -> dict[str, Any]:
    """Median, p95 (nearest rank) and max of ``seconds``."""
    ordered = sorted(seconds)
    return {"n": len(seconds), "seconds": seconds, "median": statistics.median(seconds),
            "p95": ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))],
            "max": ordered[-1]}


def default_env(bootstrap: str, topics: Any, work: Path, data: str, **overrides: Any
                ) -> dict[str, str]:
    """A test worker's environment with the product's defaults for the group (the session
    timeout) and the transactional output (the exactly-once releases), ticks off."""
    env = worker_env(bootstrap, topics, write_schema(work / "schema.json"), work / data,
                     tick_seconds=0, **overrides)
    env.pop("DPSYNTH_SESSION_TIMEOUT_S")  # the test kit's 10 s: use the default
    return env


def _ready_at(worker: WorkerProcess, timeout_s: float) -> float:
    """Monotonic time at which /readyz first answers 200 (assigned, state loaded)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(  # noqa: S310 - fixed local http URL
                    f"http://127.0.0.1:{worker.port}/readyz", timeout=1):
                return time.monotonic()
        except OSError:
            if not worker.alive:
                raise RuntimeError(f"worker exited:\n{worker.log_tail()}") from None
            time.sleep(0.02)
    raise TimeoutError(f"not ready in {timeout_s} s:\n{worker.log_tail()}")


def _logged_ready_s(log: Path, after: int) -> float:
    """The seconds of the last ``ready`` start-up phase logged past byte ``after``."""
    found = re.findall(r"start-up \[(\d+\.\d) s\] ready", log.read_text()[after:])
    return float(found[-1]) if found else float("nan")


def measure_ready(bootstrap: str, restarts: int, work: Path) -> dict[str, Any]:
    """SIGTERM and restart ``restarts`` times on local state; ready and drain seconds."""
    topics = unique_topics("ready")
    create_topics(bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    env = default_env(bootstrap, topics, work, "ready-data", group_instance_id="worker-0")
    log = work / "ready.log"
    points = np.random.default_rng(12).random((10**6, 2))
    ready, logged, drain = [], [], []
    with Feeder(bootstrap, topics.input, points):
        worker = WorkerProcess(env, log).start()
        first_record_after(worker, 120)
        for _ in range(restarts):
            time.sleep(1.5)  # records flow: state and offsets move
            assert worker.proc is not None
            stopping = time.monotonic()
            worker.stop(60)  # SIGTERM: finish the batch, publish, commit, close
            drain.append(time.monotonic() - stopping)
            offset = log.stat().st_size
            launched = time.monotonic()
            worker = WorkerProcess(env, log).start()
            ready.append(_ready_at(worker, 120) - launched)
            logged.append(_logged_ready_s(log, offset))
        worker.stop(60)
    return {"ready": distribution(ready), "ready_logged": distribution(logged),
            "sigterm_drain": distribution(drain),
            "bare_consumer_join": bare_join_seconds(bootstrap, topics.input)}


def measure(bootstrap: str, kills: int, work: Path) -> dict[str, Any]:
    """Kill and restart in place ``kills`` times; the seconds of each, and the output's check."""
    from tests.support.embedded import check_against_embedded, embedded_release_records

    points = np.random.default_rng(11).random((200_000, 2))
    topics = unique_topics("recovery")
    create_topics(bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    env = default_env(bootstrap, topics, work, "data", group_instance_id="worker-0")
    log = work / "worker.log"
    times: list[float] = []
    with Feeder(bootstrap, topics.input, points) as feeder:
        worker = WorkerProcess(env, log).start()
        first_record_after(worker, 120)
        for _ in range(kills):
            time.sleep(1.5)  # records flow, ticks open and close
            killed = time.monotonic()
            worker.kill()
            worker.stop()
            worker = WorkerProcess(env, log).start()  # the orchestrator's restart
            times.append(first_record_after(worker, 120) - killed)
        time.sleep(1.0)
    sent = feeder.sent
    worker.wait_for(lambda m: m.get("dpsynth_t", {}).get("0") == sent, timeout_s=120)
    worker.stop()
    expected = embedded_release_records(points[:sent], epsilon=1.0, release_every=1000,
                                        max_depth=12, run_id="test-run", partition=0)
    check_against_embedded(read_topic(bootstrap, topics.output),
                           {(0, s): r for s, r in expected.items()}, "test-run")
    return distribution(times)


def _owned(worker: WorkerProcess) -> set[str]:
    return set(worker.metrics().get("dpsynth_watermark", {}))


def measure_dead_member(bootstrap: str, kills: int, work: Path) -> dict[str, Any]:
    """Kill a static member that is not restarted ``kills`` times; kill → the survivor's
    first record of the dead member's partition."""
    topics = unique_topics("dead-member")
    create_topics(bootstrap, {topics.input: 2, topics.output: 2, topics.dead_letter: 2})
    envs = [default_env(bootstrap, topics, work, f"member-{k}", group_instance_id=f"member-{k}")
            for k in range(2)]
    logs = [work / f"member-{k}.log" for k in range(2)]
    points = np.random.default_rng(13).random((10**6, 2))
    times: list[float] = []
    with Feeder(bootstrap, topics.input, points, partitions=2):
        workers = [WorkerProcess(env, log).start() for env, log in zip(envs, logs, strict=True)]
        try:
            for _ in range(kills):
                _settle(workers)
                victim, survivor = workers
                lost = next(iter(_owned(victim)))
                time.sleep(1.5)
                killed = time.monotonic()
                victim.kill()
                victim.stop()
                times.append(first_record_after(survivor, 180, partition=lost) - killed)
                workers[0] = WorkerProcess(envs[0], logs[0]).start()  # back, for the next kill
        finally:
            for worker in workers:
                worker.stop(60)
    return distribution(times)


def _settle(workers: list[WorkerProcess], timeout_s: float = 180) -> None:
    """Wait until each worker owns one partition (after a restart's rebalance)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        owned = [_owned(w) for w in workers]
        if all(len(o) == 1 for o in owned) and owned[0] != owned[1]:
            return
        time.sleep(0.2)
    raise TimeoutError("the group did not settle:\n" + workers[0].log_tail())


def _line(name: str, d: dict[str, Any]) -> str:
    values = ", ".join(f"{t:.2f}" for t in d["seconds"])
    return (f"{name} (n={d['n']}): median {d['median']:.2f} s, p95 {d['p95']:.2f} s, max "
            f"{d['max']:.2f} s ({values})")


@click.command("recovery")
@click.option("--bootstrap", help="A running broker (host:port); default: a local one.")
@click.option("--kills", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--restarts", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--kafka-dir", default=DEFAULT_KAFKA_DIR, show_default=True)
def bench_recovery(bootstrap: str | None, kills: int, restarts: int, kafka_dir: str) -> None:
    """Ready after restart, kill -9 → first record (in place; dead static member), SIGTERM."""
    with bench_broker(bootstrap, kafka_dir) as address, \
            tempfile.TemporaryDirectory() as work:
        click.echo(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
        ready = measure_ready(address, restarts, Path(work))
        bare = ready["bare_consumer_join"]
        click.echo(_line("ready after a restart on local state (launch → /readyz)",
                         ready["ready"]))
        click.echo(f"  ratio of the median to a bare consumer's join ({bare:.2f} s): "
                   f"{ready['ready']['median'] / bare:.1f}×")
        click.echo(_line("  the same, from the log's ready phase (since process start)",
                         ready["ready_logged"]))
        click.echo(_line("SIGTERM → exit (drain)", ready["sigterm_drain"]))
        in_place = measure(address, kills, Path(work))
        click.echo(_line("kill -9 → first record, restarted in place", in_place)
                   + "; releases byte-identical")
        dead = measure_dead_member(address, kills, Path(work))
        click.echo(_line("kill -9 → first record, static member not restarted (survivor)",
                         dead))
        click.echo(f"load average at end: {os.getloadavg()[0]:.1f}")
