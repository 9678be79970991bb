"""Recovery after kill -9: from SIGKILL of a worker to the first record its restart processes.

``python -m benchmarks recovery [--kills 10]``. A producer keeps sending one 10-record message
every 20 ms; the worker (a static member, the default session timeout) is killed with SIGKILL
and restarted at once on the same data directory, as an orchestrator restarts a pod; the time
from the kill to the new process's first processed record (``dpsynth_records_in_total`` > 0)
is measured per kill, and the distribution (median, p95, max) is printed beside the time a
bare confluent-kafka consumer takes to join the same broker (the baseline of the same run).
At the end every release is checked byte-identical to the embedded synthesizer's over the
records sent. Numbers: docs/benchmarks.md "Kafka worker".

This was a wall-clock assertion in the test suite; timings belong here.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

from benchmarks.kafka import DEFAULT_KAFKA_DIR, bench_broker
from dpsynth.testing.kafka import (
    WorkerProcess,
    create_topics,
    encode_records,
    produce_messages,
    read_topic,
    records_of,
    unique_topics,
    worker_env,
    write_schema,
)


class Feeder:
    """Sends one 10-record message every 20 ms from ``points`` until stopped or exhausted."""

    def __init__(self, bootstrap: str, topic: str, points: np.ndarray) -> None:
        self.bootstrap, self.topic, self.points = bootstrap, topic, points
        self.sent = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set() and self.sent < len(self.points):
            batch = self.points[self.sent:self.sent + 10]
            produce_messages(self.bootstrap, self.topic, [(0, encode_records(records_of(batch)))],
                             linger_ms=0)
            self.sent += len(batch)
            time.sleep(0.02)

    def __enter__(self) -> Feeder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join(60)


def first_record_after(worker: WorkerProcess, timeout_s: float) -> float:
    """Monotonic time at which the worker's /metrics first shows a processed record."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if worker.metrics().get("dpsynth_records_in_total", {}).get("0", 0) > 0:
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


def measure(bootstrap: str, kills: int, work: Path) -> dict[str, Any]:
    """Kill and restart ``kills`` times; the seconds of each, and the check of the output."""
    from tests.support.embedded import check_against_embedded, embedded_release_records

    points = np.random.default_rng(11).random((200_000, 2))
    topics = unique_topics("recovery")
    create_topics(bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    env = worker_env(bootstrap, topics, write_schema(work / "schema.json"), work / "data",
                     tick_seconds=0, session_timeout_s=30)
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
    bare = bare_join_seconds(bootstrap, topics.input)
    ordered = sorted(times)
    return {"kills": kills, "seconds": times, "median": statistics.median(times),
            "p95": ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))],
            "max": ordered[-1], "bare_consumer_join": bare}


@click.command("recovery")
@click.option("--bootstrap", help="A running broker (host:port); default: a local one.")
@click.option("--kills", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--kafka-dir", default=DEFAULT_KAFKA_DIR, show_default=True)
def bench_recovery(bootstrap: str | None, kills: int, kafka_dir: str) -> None:
    """kill -9 → first record processed by the restarted worker: median, p95, max."""
    with bench_broker(bootstrap, kafka_dir) as address, \
            tempfile.TemporaryDirectory() as work:
        result = measure(address, kills, Path(work))
    seconds = ", ".join(f"{t:.2f}" for t in result["seconds"])
    click.echo(f"kill -9 → first record of the restarted worker over {kills} kills: "
               f"median {result['median']:.2f} s, p95 {result['p95']:.2f} s, max "
               f"{result['max']:.2f} s ({seconds}); a bare consumer joins in "
               f"{result['bare_consumer_join']:.2f} s (ratio of the median "
               f"{result['median'] / result['bare_consumer_join']:.1f}×); releases byte-identical")
