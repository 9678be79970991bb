"""The project's image (deploy/Dockerfile) as a worker: a container in place of a subprocess.

Our own tests' kit (not shipped). :class:`ContainerWorker` is a
:class:`~dpsynth.testing.kafka.WorkerProcess` whose process is the container engine's client
(``podman run``, attached, the container's output in the log file): :meth:`~ContainerWorker.kill`
is ``podman kill -s KILL`` and :meth:`~ContainerWorker.stop` ``podman stop`` (SIGTERM, then
SIGKILL), as an orchestrator does. ``--network=host``: the worker reaches the local broker on
127.0.0.1 and serves /metrics on its own port, which the test polls as for a subprocess.

The engine and the image come from ``deploy/image.sh`` (``make image``), so that tests and builds
agree on both; :func:`image_problem` says why the image cannot be tested (no engine, not built,
built from other sources than this checkout, or a package inside that is not this checkout's:
the label alone once hid a stale layer).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from dpsynth.testing.kafka import TEST_KEY_HEX, WorkerProcess

ROOT = Path(__file__).parents[2]
IMAGE_SCRIPT = ROOT / "deploy" / "image.sh"
#: What the image test needs on a Debian machine (`make image` makes the base with debootstrap).
PACKAGES = "podman runc debootstrap"
#: Set to 1 to fail, not skip, when the image cannot be tested (CI).
ENV_REQUIRED = "DPSYNTH_IMAGE_REQUIRED"
#: Where the worker's files are inside the container.
DATA_DIR = "/data"
SCHEMA_FILE = "/etc/dpsynth/schema.json"
KEY_FILE = "/run/secrets/dpsynth_noise_key"
#: The image's unprivileged user (deploy/Dockerfile).
IMAGE_UID = 10001


def image_name() -> str:
    """The image under test: ``DPSYNTH_IMAGE`` (the Makefile's ``IMAGE``), else dpsynth:0.1.0."""
    return os.environ.get("DPSYNTH_IMAGE", "dpsynth:0.1.0")


def engine_env() -> dict[str, str]:
    """The environment of engine commands: podman reads deploy/containers.conf unless
    ``CONTAINERS_CONF`` names another file (as in the Makefile)."""
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(ROOT / "deploy" / "containers.conf"))
    return env


def _script(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own script, fixed sub-command
        [shutil.which("bash") or "/bin/bash", str(IMAGE_SCRIPT), command],
        capture_output=True, text=True, env=engine_env(), timeout=120, check=False,
    )


def engine() -> str | None:
    """``podman`` or ``docker`` (the one ``make image`` uses), None when none is usable."""
    proc = _script("engine")
    return proc.stdout.strip() if proc.returncode == 0 else None


def run_engine(engine_name: str, *args: str, timeout_s: float = 120,
               check: bool = True) -> subprocess.CompletedProcess[str]:
    """One engine command (``podman inspect ...``), its output captured."""
    return subprocess.run(  # noqa: S603 - the engine found by deploy/image.sh, our arguments
        [engine_name, *args], capture_output=True, text=True, env=engine_env(),
        timeout=timeout_s, check=check,
    )


def image_problem(engine_name: str | None) -> str | None:
    """Why the image cannot be tested here, or None when it can."""
    if engine_name is None:
        return (f"no container engine: install {PACKAGES} (Debian: apt-get install {PACKAGES}), "
                "then `make image`")
    image = image_name()
    found = run_engine(engine_name, "image", "inspect", "--format",
                       '{{ index .Config.Labels "dpsynth.source-digest" }}', image, check=False)
    if found.returncode != 0:
        return f"image {image} is not built: `make image` (needs {PACKAGES})"
    built_from, checkout = found.stdout.strip(), _script("digest").stdout.strip()
    if built_from != checkout:
        return (f"image {image} was built from other sources ({built_from or 'unlabelled'}) "
                f"than this checkout ({checkout}): `make image`")
    installed = run_engine(engine_name, "run", "--rm", "--network=host", "--entrypoint",
                           "python", image, "-c", _INSTALLED_DIGEST, check=False)
    if installed.stdout.strip() != package_digest(ROOT / "operators" / "dpsynth"):
        return (f"image {image} is labelled with this checkout's digest but its installed "
                f"package differs ({installed.stdout.strip() or installed.stderr[-300:]}): "
                "`make image` (a stale build layer)")
    return None


def package_digest(package: Path) -> str:
    """sha256 over the package's .py files (relative path and bytes, in path order)."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


#: :func:`package_digest` of the package installed in the image, run by its Python.
_INSTALLED_DIGEST = (
    "import hashlib, pathlib, dpsynth; p = pathlib.Path(dpsynth.__file__).parent; "
    "d = hashlib.sha256(); "
    "[d.update(f.relative_to(p).as_posix().encode() + bytes(1) + f.read_bytes()) "
    "for f in sorted(p.rglob('*.py'))]; print(d.hexdigest())"
)


def container_files(directory: Path, schema_file: Path) -> dict[str, str]:
    """Host files of one container → where they are mounted: its data directory (writable by
    the image's user), the schema and the test key as a file secret (read-only)."""
    directory.mkdir(parents=True, exist_ok=True)
    data = directory / "data"
    data.mkdir(exist_ok=True)
    key = directory / "noise-key"
    key.write_text(TEST_KEY_HEX)
    if os.geteuid() == 0:  # root (CI): owned by the image's user, as a Kubernetes secret
        os.chown(data, IMAGE_UID, IMAGE_UID)
        os.chown(key, IMAGE_UID, IMAGE_UID)
        key.chmod(0o400)
    else:  # rootless: the container's uid maps elsewhere
        data.chmod(0o777)
        key.chmod(0o444)
    return {str(data): DATA_DIR, str(schema_file): f"{SCHEMA_FILE}:ro", str(key): f"{KEY_FILE}:ro"}


def container_env(env: Mapping[str, str]) -> dict[str, str]:
    """A test worker's settings (:func:`~dpsynth.testing.kafka.worker_env`) as the container
    sees them: its paths, the key as a file; nothing else of the host's environment."""
    out = {k: v for k, v in env.items() if k.startswith("DPSYNTH_")}
    out.pop("DPSYNTH_NOISE_KEY", None)
    out.pop("DPSYNTH_STATE_DIR", None)  # the image's own, on its data volume
    out.update({"DPSYNTH_DATA_DIR": DATA_DIR, "DPSYNTH_SCHEMA_FILE": SCHEMA_FILE,
                "DPSYNTH_NOISE_KEY_FILE": KEY_FILE})
    return out


class ContainerWorker(WorkerProcess):
    """``dpsynth worker`` in a container of the image, named ``name`` (its static group member
    id too, as a StatefulSet's pod name), with ``files`` mounted (host path → container path)."""

    def __init__(self, engine_name: str, name: str, env: Mapping[str, str],
                 files: Mapping[str, str], log_path: Path) -> None:
        super().__init__(env, log_path)
        self.engine, self.name, self.files = engine_name, name, dict(files)
        self.container_env = {**container_env(env), "DPSYNTH_GROUP_INSTANCE_ID": name}

    def start(self) -> ContainerWorker:
        """``podman run --rm --network=host ... IMAGE`` (appends to the log file)."""
        run_engine(self.engine, "rm", "-f", self.name, check=False)  # a leftover of a crash
        # --no-healthcheck: the image's HEALTHCHECK needs systemd timers under podman (none on
        # CI machines); the test polls /healthz and /metrics itself.
        command = [self.engine, "run", "--rm", "--name", self.name, "--network=host",
                   "--no-healthcheck"]
        for host, inside in self.files.items():
            command += ["--volume", f"{host}:{inside}"]
        for key, value in self.container_env.items():
            command += ["--env", f"{key}={value}"]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(  # noqa: S603 - the engine, our arguments
            [*command, image_name(), "dpsynth", "worker"],
            env=engine_env(), stdout=self._log, stderr=subprocess.STDOUT,
        )
        return self

    def kill(self) -> None:
        """``podman kill -s KILL``: the container's processes die at once, as a crashed pod."""
        if self.alive:
            assert self.proc is not None
            run_engine(self.engine, "kill", "--signal", "KILL", self.name, check=False)
            self.proc.wait(60)

    def stop(self, timeout_s: float = 30) -> None:
        """``podman stop``: SIGTERM (the image's STOPSIGNAL), SIGKILL after ``timeout_s``."""
        try:
            if self.alive:
                assert self.proc is not None
                run_engine(self.engine, "stop", "--time", str(int(timeout_s)), self.name,
                           timeout_s=timeout_s + 60, check=False)
                self.proc.wait(60)
        finally:
            run_engine(self.engine, "rm", "-f", self.name, check=False)
            if self._log is not None:
                self._log.close()
                self._log = None


def compose_command(engine_name: str) -> list[str] | None:
    """The compose tool of ``engine_name``: podman-compose (the dev extra's, else on PATH),
    ``docker compose``; None when there is none."""
    if engine_name == "podman":
        found = (shutil.which("podman-compose", path=str(Path(sys.executable).parent))
                 or shutil.which("podman-compose"))
        return [found] if found else None
    probe = run_engine(engine_name, "compose", "version", check=False)
    return [engine_name, "compose"] if probe.returncode == 0 else None


def remove_compose_project(engine_name: str, compose: list[str], files: list[str],
                           project: str) -> None:
    """Stop the project's containers (SIGTERM), remove them with their anonymous volumes (the
    image's VOLUME, which podman-compose's ``down`` keeps), then ``down`` (its network)."""
    def run_compose(*args: str) -> None:
        subprocess.run(  # noqa: S603 - the compose tool found above, our arguments
            [*compose, "-p", project, *[a for f in files for a in ("-f", f)], *args],
            capture_output=True, env=engine_env(), timeout=180, check=False)

    run_compose("stop", "-t", "30")
    left = run_engine(engine_name, "ps", "-a", "-q", "--filter",
                      f"label=com.docker.compose.project={project}", check=False).stdout.split()
    if left:
        run_engine(engine_name, "rm", "-f", "-v", *left, check=False)
    run_compose("down")
    run_engine(engine_name, "network", "rm", "-f", f"{project}_default", check=False)
