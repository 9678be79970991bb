"""kafka-local.sh's ports can be set (issue 46): DPSYNTH_KAFKA_PORT and
DPSYNTH_KAFKA_CONTROLLER_PORT, checked by its `ports` command, which starts nothing."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest

from dpsynth.testing.broker import script_path

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _ports(**env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("DPSYNTH_KAFKA_PORT", "DPSYNTH_KAFKA_CONTROLLER_PORT",
                         "DPSYNTH_KAFKA_NODES")}
    return subprocess.run(  # noqa: S603 - the packaged script, fixed arguments
        [shutil.which("bash") or "/bin/bash", str(script_path()), "ports"],
        env={**base, "DPSYNTH_PYTHON": sys.executable, **env},
        capture_output=True, text=True, timeout=60, check=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_by_default_both_ports_are_picked_free_and_distinct():
    proc = _ports()
    assert proc.returncode == 0, proc.stderr
    broker, controller = map(int, proc.stdout.split())
    assert broker != controller and broker > 0 and controller > 0


def test_set_ports_are_used():
    port = _free_port()
    proc = _ports(DPSYNTH_KAFKA_PORT=str(port))
    assert proc.returncode == 0, proc.stderr
    broker, controller = map(int, proc.stdout.split())
    assert broker == port != controller
    proc = _ports(DPSYNTH_KAFKA_PORT=str(port), DPSYNTH_KAFKA_CONTROLLER_PORT=str(port + 1))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(port), str(port + 1)]


def test_a_cluster_node_i_uses_the_set_ports_plus_i_minus_1():
    proc = _ports(DPSYNTH_KAFKA_NODES="3", DPSYNTH_KAFKA_PORT="39092",
                  DPSYNTH_KAFKA_CONTROLLER_PORT="39192")
    if proc.returncode == 1:  # one of them happens to be taken on this machine
        pytest.skip(proc.stderr)
    assert [line.split() for line in proc.stdout.splitlines()] == [
        ["39092", "39192"], ["39093", "39193"], ["39094", "39194"]]


def test_a_taken_port_fails_naming_the_setting():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        proc = _ports(DPSYNTH_KAFKA_CONTROLLER_PORT=str(s.getsockname()[1]))
    assert proc.returncode == 1 and "DPSYNTH_KAFKA_CONTROLLER_PORT" in proc.stderr


@pytest.mark.parametrize("env", [
    {"DPSYNTH_KAFKA_PORT": "abc"},
    {"DPSYNTH_KAFKA_PORT": "70000"},
    {"DPSYNTH_KAFKA_PORT": "39092", "DPSYNTH_KAFKA_CONTROLLER_PORT": "39092"},
    {"DPSYNTH_KAFKA_NODES": "3", "DPSYNTH_KAFKA_PORT": "39092",
     "DPSYNTH_KAFKA_CONTROLLER_PORT": "39093"},  # node 2's broker port is node 1's controller's
])
def test_bad_or_overlapping_settings_are_refused(env):
    proc = _ports(**env)
    assert proc.returncode == 2 and "DPSYNTH_KAFKA_" in proc.stderr
