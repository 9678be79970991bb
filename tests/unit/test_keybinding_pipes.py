"""P13 on every input kind: the key is bound to the bytes a command read, not to a re-read path.

Real processes and real OS pipes (``subprocess`` with ``stdin=PIPE`` and ``--input
/dev/stdin``), a named FIFO fed by a writer thread, and regular files: a pipe re-opened after
it was read is empty, so a digest taken by re-opening the path bound every pipe to the same
empty input and let D then D ∪ {x} through under one key (issue 44). Every test has its own
``DPSYNTH_STATE_DIR`` (``key_state_dir`` in tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import dpsynth
from dpsynth.cli import main
from dpsynth.keybinding import NEW_KEY, STATE_DIR_ENV
from dpsynth.keys import KEY_ENV, KEY_FILE_ENV

SECRET_HEX = "5d" * 16 + "e1" * 16
FAST = ("--max-depth", "8", "--release-every", "100", "--no-report")
ROOT = Path(__file__).resolve().parents[2]
#: A process that waits longer than this is stuck (e.g. re-opening a drained FIFO).
TIMEOUT = 60


def _env(state: Path) -> dict[str, str]:
    """The test's key and state directory; the child imports the dpsynth this test imports."""
    env = {k: v for k, v in os.environ.items() if k != KEY_FILE_ENV}
    env.update({KEY_ENV: SECRET_HEX, STATE_DIR_ENV: str(state),
                "PYTHONPATH": str(Path(dpsynth.__file__).resolve().parents[1])})
    return env


def _dpsynth(state: Path, *args: str, stdin: bytes = b"") -> tuple[int, str]:
    """(exit status, standard error on one line) of ``python -m dpsynth ARGS`` as a process;
    ``stdin`` goes through a real OS pipe."""
    done = subprocess.run(  # noqa: S603 (our interpreter, our arguments)
        [sys.executable, "-m", "dpsynth", *args], input=stdin, env=_env(state),
        capture_output=True, timeout=TIMEOUT, check=False)
    return done.returncode, " ".join(done.stderr.decode().split())


def _csv(n: int, seed: int = 0) -> bytes:
    rows = np.random.default_rng(seed).random((n, 2))
    return ("x,y\n" + "".join(f"{a:.5f},{b:.5f}\n" for a, b in rows.tolist())).encode()


D = _csv(300)
D_AND_X = D + b"0.50000,0.50000\n"  # D ∪ {x}


def _run(state: Path, out: Path, source: str, stdin: bytes = b"", *extra: str
         ) -> tuple[int, str]:
    """(exit status, standard error) of ``dpsynth run --input SOURCE``."""
    return _dpsynth(state, "run", "--input", source, *FAST, "--out", str(out), *extra,
                    stdin=stdin)


def _releases(out: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((out / "releases").iterdir())]


def _refused(status: int, err: str, out: Path, difference: str = "another input") -> None:
    assert status == 1, err
    assert f"already ran over {difference}" in err and NEW_KEY in err, err
    assert not out.exists()  # refused before anything is written
    assert SECRET_HEX not in err


@contextlib.contextmanager
def _fifo(path: Path, data: bytes) -> Iterator[Path]:
    """A named FIFO at ``path`` that one reader reads ``data`` from (a writer thread)."""
    if not path.exists():
        os.mkfifo(path)

    def write() -> None:
        with contextlib.suppress(BrokenPipeError), open(path, "wb") as f:
            f.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        yield path
    finally:
        if writer.is_alive():  # nobody opened it: open it so the writer's open returns
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(TIMEOUT)


def test_P13_a_grown_input_through_a_pipe_is_refused(tmp_path: Path,
                                                     key_state_dir: Path) -> None:
    first = _run(key_state_dir, tmp_path / "a", "/dev/stdin", D)
    assert first[0] == 0, first[1]
    again = _run(key_state_dir, tmp_path / "b", "/dev/stdin", D)  # a replay: the same bytes
    assert again[0] == 0, again[1]
    assert _releases(tmp_path / "a") == _releases(tmp_path / "b")
    _refused(*_run(key_state_dir, tmp_path / "c", "/dev/stdin", D_AND_X), tmp_path / "c")


def test_P13_a_file_and_the_same_bytes_through_a_pipe_are_one_input(
        tmp_path: Path, key_state_dir: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_bytes(D)
    assert _run(key_state_dir, tmp_path / "a", str(data))[0] == 0
    piped = _run(key_state_dir, tmp_path / "b", "/dev/stdin", D)
    assert piped[0] == 0, piped[1]
    assert _releases(tmp_path / "a") == _releases(tmp_path / "b")
    _refused(*_run(key_state_dir, tmp_path / "c", "/dev/stdin", D_AND_X), tmp_path / "c")


def test_P13_a_named_fifo_is_bound_by_the_bytes_read(tmp_path: Path,
                                                     key_state_dir: Path) -> None:
    fifo = tmp_path / "input.fifo"
    with _fifo(fifo, D):
        first = _run(key_state_dir, tmp_path / "a", str(fifo))
    assert first[0] == 0, first[1]
    with _fifo(fifo, D):
        assert _run(key_state_dir, tmp_path / "b", str(fifo))[0] == 0
    assert _releases(tmp_path / "a") == _releases(tmp_path / "b")
    with _fifo(fifo, D_AND_X):
        _refused(*_run(key_state_dir, tmp_path / "c", str(fifo)), tmp_path / "c")


def test_P13_a_schema_through_a_fifo_is_bound_by_its_bytes(tmp_path: Path,
                                                           key_state_dir: Path) -> None:
    data, fifo = tmp_path / "d.csv", tmp_path / "schema.fifo"
    data.write_bytes(D)
    schema = ('{"version": 1, "columns": [{"name": "x", "lower": 0, "upper": %s}, '
              '{"name": "y", "lower": 0, "upper": 1}]}')
    with _fifo(fifo, (schema % 1).encode()):
        first = _run(key_state_dir, tmp_path / "a", str(data), b"", "--schema", str(fifo))
    assert first[0] == 0, first[1]
    with _fifo(fifo, (schema % 2).encode()):  # other bounds: another setting, one path
        refused = _run(key_state_dir, tmp_path / "b", str(data), b"", "--schema", str(fifo))
    _refused(*refused, tmp_path / "b", "this input with other settings")


def test_P13_tabular_run_through_a_pipe_is_bound_by_the_bytes_read(
        tmp_path: Path, key_state_dir: Path) -> None:
    head = (ROOT / "examples" / "adult.csv").read_text().splitlines()[:201]
    small = ("\n".join(head) + "\n").encode()
    other = ("\n".join(head[:-1]) + "\n").encode()  # one record fewer

    def tabular(out: Path, data: bytes) -> tuple[int, str]:
        return _dpsynth(key_state_dir, "tabular", "run", "--data", "/dev/stdin", "--domain",
                        str(ROOT / "examples" / "adult.domain.json"), "--neighbours",
                        "replace", "--release-every", "100", "--no-report", "--out", str(out),
                        stdin=data)

    first = tabular(tmp_path / "a", small)
    assert first[0] == 0, first[1]
    _refused(*tabular(tmp_path / "b", other), tmp_path / "b")


@pytest.mark.parametrize("command", [("run",), ("offline",), ("tabular", "run")])
def test_a_dash_is_not_an_input(tmp_path: Path, command: tuple[str, ...]) -> None:
    """``-`` is refused as a missing file (exit 2): standard input is ``--input /dev/stdin``."""
    option = "--data" if command[0] == "tabular" else "--input"
    done = CliRunner().invoke(main, [*command, option, "-", "--out", str(tmp_path / "o.csv")])
    assert done.exit_code == 2 and "'-' does not exist" in done.stderr
