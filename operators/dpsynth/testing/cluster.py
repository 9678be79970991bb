"""A Kafka cluster of several KRaft nodes on loopback, for failure tests (``kafka-local.sh``).

Layer: adapter (subprocess; confluent-kafka's AdminClient for partition leaders). The packaged
script with ``DPSYNTH_KAFKA_NODES=N`` starts N combined broker + controller nodes in one run
directory (replication factor 3, ``min.insync.replicas=2``, internal topics replicated N
times); :meth:`LocalCluster.kill` SIGKILLs one node, :meth:`LocalCluster.restart` starts it
again on its data.

Example::

    with LocalCluster(tmp_path / "cluster") as cluster:
        leader = cluster.leader("raw-events", 0)
        cluster.kill(leader)
        ...
        cluster.restart(leader)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from dpsynth.testing.broker import START_TIMEOUT_S, BrokerError, script_path

_PREFIX = "KAFKA_BOOTSTRAP_SERVERS="


class LocalCluster:
    """``nodes`` local Kafka nodes in ``run_dir`` (started by :meth:`start`, or ``with``)."""

    def __init__(self, run_dir: Path, nodes: int = 3) -> None:
        self.run_dir = Path(run_dir)
        self.nodes = nodes
        self.bootstrap = ""

    def _script(self, *args: str, timeout: float = START_TIMEOUT_S) -> str:
        bash = shutil.which("bash")
        if bash is None:
            raise BrokerError("bash is needed to run kafka-local.sh")
        env = {**os.environ, "DPSYNTH_KAFKA_NODES": str(self.nodes),
               "DPSYNTH_KAFKA_DIR": str(self.run_dir)}
        env.setdefault("DPSYNTH_PYTHON", sys.executable)
        proc = subprocess.run(  # noqa: S603 - the packaged script, fixed sub-commands
            [bash, str(script_path()), *args], capture_output=True, text=True,
            timeout=timeout, env=env, check=False)
        if proc.returncode != 0:
            raise BrokerError(f"kafka-local.sh {' '.join(args)} failed "
                              f"(exit {proc.returncode}):\n{proc.stderr.strip()[-3000:]}")
        return proc.stdout

    def start(self) -> str:
        """Start every node; return the bootstrap servers once every node is a live broker."""
        for line in self._script("start").splitlines():
            if line.startswith(_PREFIX):
                self.bootstrap = line[len(_PREFIX):].strip()
                self.wait_for_brokers()
                return self.bootstrap
        raise BrokerError("kafka-local.sh start printed no bootstrap address")

    def wait_for_brokers(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Return when the metadata of *every* node lists all ``nodes`` brokers.

        A node answers on its port before it has registered with the controller, and a node's
        metadata cache learns of the others a moment after the controller does; topics created
        in between get a smaller default replication (seen twice: ``dpsynth topics create``
        chose 2 on a three-node cluster that had just started, on a loaded machine).
        """
        from confluent_kafka.admin import AdminClient

        admins = [AdminClient({"bootstrap.servers": address, "log_level": 0})
                  for address in self.bootstrap.split(",")]
        deadline = time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline:
            try:
                seen = min(len(a.list_topics(timeout=10).brokers) for a in admins)
            except Exception:  # a node not answering yet (or just restarted): keep waiting
                seen = 0
            if seen >= self.nodes:
                return
            time.sleep(0.2)
        raise BrokerError(f"{seen} of {self.nodes} brokers registered after {timeout_s:g} s")

    def stop(self) -> None:
        """Stop every node."""
        self._script("stop", timeout=180)

    def kill(self, node: int) -> None:
        """SIGKILL node ``node`` (1..nodes), as a crashed machine."""
        self._script("kill", str(node), timeout=60)

    def restart(self, node: int) -> None:
        """Start a killed node again on its data; return when it is a live broker again."""
        self._script("restart", str(node))
        self.wait_for_brokers()

    def leader(self, topic: str, partition: int, timeout_s: float = 60.0) -> int:
        """Node id of the current leader of ``topic``'s ``partition``."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            info = admin.list_topics(topic, timeout=10).topics.get(topic)
            if info is not None and partition in info.partitions:
                leader = info.partitions[partition].leader
                if leader >= 0:
                    return int(leader)
            time.sleep(0.2)
        raise BrokerError(f"{topic}[{partition}] has no leader after {timeout_s:g} s")

    def in_sync(self, topic: str, partition: int) -> list[int]:
        """The in-sync replicas of ``topic``'s ``partition`` (node ids)."""
        from confluent_kafka.admin import AdminClient

        info = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(
            topic, timeout=10).topics[topic]
        return sorted(info.partitions[partition].isrs)

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
