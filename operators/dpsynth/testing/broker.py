"""A Kafka broker for integration tests and local use: an existing one, a local one, or a container.

Layer: adapter (subprocess, optional testcontainers; no DP arithmetic, no Kafka client import).

Where the broker comes from, in order (:func:`acquire_broker`):

1. ``KAFKA_BOOTSTRAP_SERVERS`` in the environment: an existing broker, used as is, never stopped.
2. Docker, when ``docker info`` succeeds and ``testcontainers`` is importable (and
   ``DPSYNTH_KAFKA_NO_DOCKER`` is unset): an ``apache/kafka:4.0.0`` container in KRaft mode with
   faust-streaming's CI settings; when it cannot start (no registry to pull the image from),
   the next.
3. Otherwise a real single-node Apache Kafka 4.0.0 (KRaft) started by the script shipped beside
   this module (``kafka_local/kafka-local.sh``; ``kafka-local.sh`` in a checkout) from jars
   fetched once from Maven Central (Java 17 and Maven needed; no Docker).

:func:`start_local_broker`, :func:`stop_local_broker` and :func:`local_broker` drive the script
directly. :func:`bootstrap_servers` is for commands: it returns the environment's address, else
starts a broker and leaves it running (stop it with ``bash kafka-local.sh stop``).

The script is package data (found beside this module, or at ``DPSYNTH_KAFKA_SCRIPT``); its own
settings (``DPSYNTH_KAFKA_DIR``, ``DPSYNTH_KAFKA_HOME``, ...) are
passed through the environment.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dpsynth.errors import DpsynthError

log = logging.getLogger(__name__)

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"
ENV_SCRIPT = "DPSYNTH_KAFKA_SCRIPT"
ENV_NO_DOCKER = "DPSYNTH_KAFKA_NO_DOCKER"
DOCKER_IMAGE = "docker.io/apache/kafka:4.0.0"  # fully qualified: podman has no short names
_PREFIX = f"{ENV_BOOTSTRAP}="

#: First start may download ~45 MB of jars with Maven, then boots a JVM on 2 cores.
START_TIMEOUT_S = 900.0
STOP_TIMEOUT_S = 60.0


class BrokerError(DpsynthError, RuntimeError):
    """A Kafka broker could not be found, started or stopped; the message says why."""


@dataclass
class Broker:
    """A broker in use: its bootstrap address, where it came from, and who must stop it."""

    bootstrap: str
    kind: Literal["external", "local", "docker"]
    started_here: bool
    _container: Any = field(default=None, repr=False, compare=False)


# --------------------------------------------------------------------------------------------
# kafka-local.sh
# --------------------------------------------------------------------------------------------
def script_path() -> Path:
    """The packaged ``kafka_local/kafka-local.sh`` (or ``DPSYNTH_KAFKA_SCRIPT``)."""
    override = os.environ.get(ENV_SCRIPT)
    packaged = Path(__file__).with_name("kafka_local") / "kafka-local.sh"
    path = Path(override) if override else packaged
    if not path.is_file():
        raise BrokerError(
            f"the local broker script ({path}) was not found; reinstall dpsynth (it ships as "
            f"package data) or set {ENV_SCRIPT} to a copy of it"
        )
    return path


def missing_prerequisites() -> list[str]:
    """What the local broker needs and this machine lacks (empty when it can start)."""
    missing = [tool for tool in ("bash", "java") if shutil.which(tool) is None]
    java_home = os.environ.get("JAVA_HOME")
    if "java" in missing and java_home and (Path(java_home) / "bin" / "java").is_file():
        missing.remove("java")
    try:
        script_path()
    except BrokerError:
        missing.append("kafka-local.sh (package data)")
    return missing


def _run_script(command: str, *, timeout: float,
                run_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash")
    if bash is None:
        raise BrokerError("bash is needed to run kafka-local.sh")
    env = dict(os.environ)
    if run_dir is not None:  # another broker: its own config, data, port and pid
        env["DPSYNTH_KAFKA_DIR"] = str(run_dir)
        for fixed in ("DPSYNTH_KAFKA_PORT", "DPSYNTH_KAFKA_CONTROLLER_PORT"):
            env.pop(fixed, None)  # the session broker's ports, if set: free ones here
    # The script's readiness probe asks for metadata with confluent-kafka when this interpreter
    # has it, so probe with the same python that runs the tests.
    env.setdefault("DPSYNTH_PYTHON", sys.executable)
    try:
        return subprocess.run(  # noqa: S603 - fixed script path, fixed sub-command
            [bash, str(script_path()), command],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BrokerError(
            f"kafka-local.sh {command} did not finish in {timeout:.0f} s"
        ) from exc


def start_local_broker(*, timeout: float = START_TIMEOUT_S, run_dir: Path | None = None) -> str:
    """Start the local KRaft broker (no-op when running) and return its bootstrap address.

    ``run_dir`` (default: the script's, ``./.kafka``) holds its config, data and pid: a
    second run dir is a second, independent broker.
    """
    proc = _run_script("start", timeout=timeout, run_dir=run_dir)
    if proc.returncode != 0:
        raise BrokerError(
            f"kafka-local.sh start failed (exit {proc.returncode}):\n{proc.stderr.strip()}"
        )
    for line in proc.stdout.splitlines():
        if line.startswith(_PREFIX):
            return line[len(_PREFIX) :].strip()
    raise BrokerError(f"kafka-local.sh start printed no {_PREFIX}...:\n{proc.stdout}")


def stop_local_broker(*, timeout: float = STOP_TIMEOUT_S, run_dir: Path | None = None) -> None:
    """Stop the local broker (SIGTERM, then SIGKILL after 30 s); no-op when it is not running."""
    proc = _run_script("stop", timeout=timeout, run_dir=run_dir)
    if proc.returncode != 0:
        raise BrokerError(
            f"kafka-local.sh stop failed (exit {proc.returncode}):\n{proc.stderr.strip()}"
        )


def local_broker_running(run_dir: Path | None = None) -> bool:
    """Whether the local broker of this run dir is up (``kafka-local.sh status``)."""
    return _run_script("status", timeout=STOP_TIMEOUT_S, run_dir=run_dir).returncode == 0


@contextlib.contextmanager
def local_broker(run_dir: Path | None = None) -> Iterator[str]:
    """The local broker's bootstrap address; stops it on exit only if this call started it."""
    was_running = local_broker_running(run_dir)
    bootstrap = start_local_broker(run_dir=run_dir)
    try:
        yield bootstrap
    finally:
        if not was_running:
            stop_local_broker(run_dir=run_dir)


# --------------------------------------------------------------------------------------------
# Docker / testcontainers (only where a Docker engine answers; not exercised on this machine)
# --------------------------------------------------------------------------------------------
def docker_available() -> bool:
    """``docker info`` succeeds and ``testcontainers`` is importable (and not switched off)."""
    if os.environ.get(ENV_NO_DOCKER):
        return False
    if importlib.util.find_spec("testcontainers") is None:
        return False
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        proc = subprocess.run(  # noqa: S603 - fixed executable found on PATH, fixed arguments
            [docker, "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _docker_host() -> str:
    override = os.environ.get("TESTCONTAINERS_HOST_OVERRIDE")
    if override:
        return override
    docker_host = os.environ.get("DOCKER_HOST", "")
    if docker_host.startswith("tcp://"):
        return docker_host[len("tcp://") :].rsplit(":", 1)[0]
    return "127.0.0.1"


def _start_container(timeout: float = 180.0) -> Broker:
    """``apache/kafka:4.0.0`` in KRaft mode, configured like faust-streaming's CI.

    testcontainers' own ``KafkaContainer`` (4.x, ``testcontainers.kafka`` and
    ``testcontainers.community.kafka``) drives the Confluent image's ``/etc/confluent/docker``
    scripts, which ``apache/kafka`` does not have, so the generic ``DockerContainer`` is used
    with a fixed host port that the broker advertises.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from testcontainers.core.container import DockerContainer

    host, port = _docker_host(), _free_port()
    container = DockerContainer(DOCKER_IMAGE).with_bind_ports(9092, port)
    settings = {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": "PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{host}:{port}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "true",
        "KAFKA_NUM_PARTITIONS": "1",
    }
    for key, value in settings.items():
        container = container.with_env(key, value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        container.start()
    bootstrap = f"{host}:{port}"
    try:
        wait_for_broker(bootstrap, timeout=timeout)
    except BaseException:
        container.stop()
        raise
    return Broker(bootstrap, "docker", True, container)


# --------------------------------------------------------------------------------------------
# Choosing a broker
# --------------------------------------------------------------------------------------------
def wait_for_broker(bootstrap: str, *, timeout: float = 60.0) -> None:
    """Block until ``bootstrap`` accepts TCP and (with confluent-kafka) answers a metadata call."""
    host, _, port_text = bootstrap.split(",")[0].rpartition(":")
    port = int(port_text)
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1).close()
        except OSError as exc:
            last = exc
            time.sleep(0.25)
            continue
        if importlib.util.find_spec("confluent_kafka") is None:
            return
        from confluent_kafka.admin import AdminClient

        try:
            metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5)
        except Exception as exc:  # noqa: BLE001 - not ready yet; retried until the deadline
            last = exc
        else:
            if metadata.brokers:
                return
        time.sleep(0.25)
    raise BrokerError(f"no Kafka broker answered at {bootstrap} within {timeout:.0f} s: {last!r}")


def acquire_broker(*, use_docker: bool | None = None) -> Broker:
    """The environment's broker, else a container (Docker), else the local KRaft broker."""
    existing = os.environ.get(ENV_BOOTSTRAP, "").strip()
    if existing:
        return Broker(existing, "external", started_here=False)
    if use_docker is None:
        use_docker = docker_available()
    if use_docker:
        try:
            return _start_container()
        except Exception as e:  # noqa: BLE001 - e.g. no registry to pull the image from
            if missing_prerequisites():
                raise
            log.warning("the Kafka container did not start (%s); using the local broker "
                        "of kafka-local.sh instead", e)
    was_running = local_broker_running()
    return Broker(start_local_broker(), "local", started_here=not was_running)


def release_broker(broker: Broker) -> None:
    """Stop ``broker`` if :func:`acquire_broker` started it; leave anything else alone."""
    if not broker.started_here:
        return
    if broker.kind == "docker" and broker._container is not None:
        broker._container.stop()
    elif broker.kind == "local":
        stop_local_broker()


_process_broker: Broker | None = None


def bootstrap_servers() -> str:
    """``KAFKA_BOOTSTRAP_SERVERS`` if set, else a started broker's address (kept for the process).

    A local broker started here keeps running after the process exits (it is a daemon of
    ``kafka-local.sh``); a container is stopped at exit.
    """
    global _process_broker
    existing = os.environ.get(ENV_BOOTSTRAP, "").strip()
    if existing:
        return existing
    if _process_broker is None:
        _process_broker = acquire_broker()
        if _process_broker.kind == "docker":
            atexit.register(release_broker, _process_broker)
    return _process_broker.bootstrap
