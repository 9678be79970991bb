"""Kafka helpers for integration tests of the worker and of its consumers, against a real broker.

Layer: adapter (confluent-kafka, subprocess). Not used by the worker itself: topics with unique
names, producing msgpack records, reading a whole topic back, and running the worker as a real
subprocess (so that SIGKILL is real).

Example::

    topics = unique_topics("e2e")
    create_topics(bootstrap, {topics.input: 1, topics.output: 1, topics.dead_letter: 1})
    with WorkerProcess(worker_env(bootstrap, topics, schema_file, data_dir)) as worker:
        produce_messages(bootstrap, topics.input, [(0, encode_records(batch))])
        worker.wait_for(lambda m: m.get("dpsynth_t", {}).get("0") == 1000)
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgpack
import numpy as np

from dpsynth.client.recording import TopicRecord
from dpsynth.client.topic_admin import ensure_topic
from dpsynth.client.transfer import read_topic_records

__all__ = [
    "TEST_KEY_HEX", "Topics", "TopicRecord", "WorkerProcess", "committed_offsets",
    "create_topics", "encode_records", "end_offsets", "free_port", "produce_messages",
    "read_topic", "records_of", "unique_topics", "worker_env", "write_schema",
]

#: A fixed test key (never use a constant key in production: releases would share noise).
TEST_KEY_HEX = "5e" * 32


@dataclass(frozen=True)
class Topics:
    """The three topic names of one test."""

    input: str
    output: str
    dead_letter: str


def unique_topics(prefix: str) -> Topics:
    """Fresh topic names, so tests never see each other's records."""
    tag = f"{prefix}-{uuid.uuid4().hex[:10]}"
    return Topics(f"{tag}-raw", f"{tag}-synthetic", f"{tag}-dead")


def create_topics(bootstrap: str, partitions: Mapping[str, int], timeout_s: float = 30) -> None:
    """Create topics (the broker's replication) and wait until their metadata is visible."""
    for name, n in partitions.items():
        ensure_topic(bootstrap, name, n, timeout_s=timeout_s)


def encode_records(records: list[dict[str, Any]] | dict[str, Any]) -> bytes:
    """One raw-events message: a map (one record) or an array of maps (a batch)."""
    return msgpack.packb(records, use_bin_type=True)


def records_of(points: np.ndarray, names: Iterable[str] = ("x", "y")) -> list[dict[str, float]]:
    """Points (n×d) as records ``{name: value}``."""
    names = tuple(names)
    return [dict(zip(names, row, strict=True)) for row in np.asarray(points).tolist()]


def produce_messages(
    bootstrap: str, topic: str,
    messages: Iterable[tuple[int | None, bytes] | tuple[int | None, bytes, bytes | None]], *,
    linger_ms: int = 5,
) -> int:
    """Send (partition, value) or (partition, value, key) messages in order, idempotently
    (partition None: chosen from the key); return how many were sent."""
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": linger_ms,
    })
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    n = 0
    for partition, value, *key in messages:
        where: dict[str, Any] = {} if partition is None else {"partition": partition}
        while True:
            try:
                producer.produce(topic, value=value, key=key[0] if key else None,
                                 on_delivery=on_delivery, **where)
                break
            except BufferError:
                producer.poll(0.05)
        n += 1
    if producer.flush(60) or errors:
        raise RuntimeError(f"produce to {topic} failed: {errors[:3]}")
    return n


def read_topic(bootstrap: str, topic: str, timeout_s: float = 30) -> list[TopicRecord]:
    """Every record currently in ``topic`` (all partitions, up to their end), read_committed.

    The reader of ``dpsynth topics export`` (:func:`~dpsynth.client.transfer.read_topic_records`:
    partitions merged by timestamp, each in offset order), so tests and exports see the same.
    """
    return list(read_topic_records(bootstrap, topic, timeout_s=timeout_s))


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """High watermark of every partition of ``topic``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets"})
    try:
        parts = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
                for p in parts}
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The consumer group's committed offsets on ``topic`` (−1001: none)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for a worker's web server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_schema(path: Path, names: Iterable[str] = ("x", "y")) -> Path:
    """A schema file with columns in [0, 1]."""
    path.write_text(json.dumps({
        "version": 1, "columns": [{"name": n, "lower": 0.0, "upper": 1.0} for n in names],
    }))
    return path


def worker_env(
    bootstrap: str,
    topics: Topics,
    schema_file: Path,
    data_dir: Path,
    **overrides: Any,
) -> dict[str, str]:
    """Environment of a test worker (fixed test key, 127.0.0.1 web port, short timeouts).

    ``overrides`` are settings by name (``release_every=500``, ``tick_seconds=2``); unset
    ones keep the worker's defaults (a step every 1000 records under replacement, a tick
    marker every 60 s).
    """
    env = {
        "DPSYNTH_BROKER": bootstrap,
        "DPSYNTH_INPUT_TOPIC": topics.input,
        "DPSYNTH_OUTPUT_TOPIC": topics.output,
        "DPSYNTH_DEAD_LETTER_TOPIC": topics.dead_letter,
        "DPSYNTH_SCHEMA_FILE": str(schema_file),
        "DPSYNTH_EPSILON": "1.0",
        "DPSYNTH_MAX_DEPTH": "12",
        "DPSYNTH_RUN_ID": "test-run",
        "DPSYNTH_DATA_DIR": str(data_dir),
        # the key's binding to its input (P13) beside the data, so it lives as long as the
        # test's worker (tests reuse one key over many topics)
        "DPSYNTH_STATE_DIR": f"{data_dir}-state",
        "DPSYNTH_NOISE_KEY": TEST_KEY_HEX,
        "DPSYNTH_WEB_PORT": str(free_port()),
        "DPSYNTH_WEB_BIND": "127.0.0.1",
        "DPSYNTH_SESSION_TIMEOUT_S": "10",
        "DPSYNTH_STATE_SYNC": "false",
        "DPSYNTH_LOG_LEVEL": "info",
        "DPSYNTH_GROUP_ID": f"{topics.input}-group",
    }
    env.update({f"DPSYNTH_{k.upper()}": str(v) for k, v in overrides.items()})
    return env


_SAMPLE = re.compile(r'^(\w+)\{partition="(\d+)"\} (\S+)$')


class WorkerProcess:
    """``python -m dpsynth worker`` as a subprocess, with its log in a file."""

    def __init__(self, env: Mapping[str, str], log_path: Path) -> None:
        self.env = {**os.environ, **env}
        self.log_path = log_path
        self.port = int(env["DPSYNTH_WEB_PORT"])
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> WorkerProcess:
        """Start the worker (appends to the log file)."""
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "dpsynth", "worker"],
            env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
        )
        return self

    @property
    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def metrics(self) -> dict[str, dict[str, float]]:
        """``{metric: {partition: value}}`` from /metrics, or {} when not reachable."""
        try:
            with urllib.request.urlopen(  # noqa: S310 - fixed local http URL
                f"http://127.0.0.1:{self.port}/metrics", timeout=2
            ) as r:
                text = r.read().decode()
        except OSError:
            return {}
        out: dict[str, dict[str, float]] = {}
        for line in text.splitlines():
            match = _SAMPLE.match(line)
            if match:
                out.setdefault(match[1], {})[match[2]] = float(match[3])
        return out

    def wait_ready(self, timeout_s: float = 60) -> None:
        """Wait until the web server answers /healthz (the worker is up, maybe not assigned)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(  # noqa: S310 - fixed local http URL
                    f"http://127.0.0.1:{self.port}/healthz", timeout=2
                ):
                    return
            except OSError:
                if not self.alive:
                    raise RuntimeError(
                        f"worker exited ({self.returncode()}):\n{self.log_tail()}"
                    ) from None
                time.sleep(0.2)
        raise TimeoutError(f"worker not ready in {timeout_s} s:\n{self.log_tail()}")

    def wait_for(
        self, predicate: Callable[[dict[str, dict[str, float]]], bool], timeout_s: float = 120
    ) -> dict[str, dict[str, float]]:
        """Poll /metrics until ``predicate`` holds; raise (with the log tail) on timeout/exit."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            metrics = self.metrics()
            if metrics and predicate(metrics):
                return metrics
            if not self.alive:
                raise RuntimeError(f"worker exited ({self.returncode()}):\n{self.log_tail()}")
            time.sleep(0.25)
        raise TimeoutError(f"worker condition not met in {timeout_s} s:\n{self.log_tail()}"
                           f"\n{self.stacks()}")

    def stacks(self) -> str:
        """Every thread's stack of the running worker (SIGUSR1, faulthandler), from its log."""
        if not self.alive:
            return "(worker not running)"
        assert self.proc is not None
        before = len(self.log_path.read_text(errors="replace"))
        self.proc.send_signal(signal.SIGUSR1)
        time.sleep(1.0)
        return "stacks:\n" + self.log_path.read_text(errors="replace")[before:][-6000:]

    def wait_log(self, text: str, timeout_s: float = 120, *, after: int = 0) -> None:
        """Wait until ``text`` appears in the log (past byte ``after``)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.log_path.read_text(errors="replace")[after:]:
                return
            if not self.alive:
                raise RuntimeError(f"worker exited ({self.returncode()}):\n{self.log_tail()}")
            time.sleep(0.2)
        raise TimeoutError(f"{text!r} not logged in {timeout_s} s:\n{self.log_tail()}")

    def wait_exit(self, timeout_s: float = 120) -> int:
        """Wait for the process to end by itself (a crash point); return its status."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise TimeoutError(
                f"worker did not exit in {timeout_s} s:\n{self.log_tail()}"
            ) from None

    def returncode(self) -> int | None:
        """Exit status, None while running."""
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        """SIGKILL, as a crashed pod."""
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM (graceful), SIGKILL after ``timeout_s``."""
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the worker's log, a run of lines that differ only in their
        numbers (a periodic "still waiting" line) shown once with its count, so that a test
        failure shows what happened before the waiting."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        out: list[str] = []
        shape, repeats = "", 0
        for line in text.splitlines():
            this = re.sub(r"\d+", "#", line)
            if out and this == shape:
                repeats += 1
                out[-1] = f"{line}  [the same line {repeats + 1} times]"
                continue
            shape, repeats = this, 0
            out.append(line)
        return "\n".join(out[-lines:])

    def __enter__(self) -> WorkerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


