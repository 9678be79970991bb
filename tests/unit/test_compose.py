"""Every compose file we ship names its images fully and renders with the compose tool at hand
(issue 46): podman does not resolve short names such as ``apache/kafka:4.0.0`` without a
registry list to search, and podman-compose then waited instead of exiting."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[2]

#: registry host (a dot or a port in it, or localhost) / path [: tag | @ digest]
QUALIFIED = re.compile(
    r"^(?:localhost|[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z0-9-]+|[a-z0-9.-]+:\d+)(?::\d+)?"
    r"/[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})$")

TIMEOUT_S = 60


def compose_files() -> list[Path]:
    """The compose files of the repository: at its root, under deploy/ and under examples/."""
    names = ("docker-compose*.y*ml", "compose*.y*ml", "podman-compose*.y*ml")
    found = {p for name in names for p in ROOT.glob(name)}
    for folder in ("deploy", "examples"):
        found |= {p for name in names for p in (ROOT / folder).rglob(name)}
    return sorted(found)


def images(node: object) -> list[str]:
    """Every ``image:`` value in a parsed compose document (services and x- blocks alike)."""
    if isinstance(node, dict):
        found = [v for k, v in node.items() if k == "image" and isinstance(v, str)]
        return found + [i for v in node.values() for i in images(v)]
    if isinstance(node, list):
        return [i for v in node for i in images(v)]
    return []


def test_the_repository_has_its_compose_file():
    assert ROOT / "docker-compose.yml" in compose_files()


@pytest.mark.parametrize("name", ["docker.io/apache/kafka:4.0.0", "localhost/dpsynth:0.1.0",
                                  "quay.io/a/b/c:1", "registry:5000/x:y",
                                  "docker.io/library/python@sha256:" + "a" * 64])
def test_qualified_names_pass(name):
    assert QUALIFIED.match(name)


@pytest.mark.parametrize("name", ["apache/kafka:4.0.0", "dpsynth:0.1.0", "kafka",
                                  "docker.io/apache/kafka", "localhost/dpsynth"])
def test_short_or_untagged_names_fail(name):
    assert not QUALIFIED.match(name)


@pytest.mark.parametrize("path", compose_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_image_is_fully_qualified(path):
    names = images(yaml.safe_load(path.read_text()))
    assert names, f"{path}: no image"
    assert [n for n in names if not QUALIFIED.match(n)] == []


def _podman_compose() -> list[str] | None:
    tool = shutil.which("podman-compose") or shutil.which(
        "podman-compose", path=str(Path(sys.executable).parent))
    return [tool] if tool and shutil.which("podman") else None


def _run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run argv in a session of its own; on timeout kill that whole session (never hang)."""
    proc = subprocess.Popen(  # noqa: S603 - a compose tool found on PATH, fixed arguments
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{' '.join(argv)} did not exit within {TIMEOUT_S} s")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _docker_compose() -> list[str] | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    try:
        found = subprocess.run(  # noqa: S603 - docker found on PATH, fixed arguments
            [docker, "compose", "version"], capture_output=True, timeout=20,
            start_new_session=True).returncode == 0
    except subprocess.TimeoutExpired:
        return None
    return [docker, "compose"] if found else None


@pytest.mark.parametrize("path", compose_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_compose_tool_renders_every_compose_file(path, tmp_path):
    tools = [t for t in (_podman_compose(), _docker_compose()) if t]
    if not tools:
        pytest.skip("neither podman-compose (with podman) nor docker compose is installed")
    key = tmp_path / "key"  # the secret's file need not hold a key to render the file
    key.write_text("0" * 64)
    env = {**os.environ, "DPSYNTH_NOISE_KEY_PATH": str(key)}
    for tool in tools:
        result = _run([*tool, "-f", str(path), "config"], env=env)
        assert result.returncode == 0, (tool, result.stdout[-2000:], result.stderr[-2000:])
        assert "image" in result.stdout
