"""The README's console commands (and docs/guide.md's, where the README sends a newcomer) run
as written, from the repository root, on examples/.

Each ``console`` block of README.md and docs/guide.md is run by bash (``set -e``), its ``$``
lines joined with their ``\\`` continuations, in a temporary directory holding the
repository's ``examples/`` and ``schemas/`` and this environment as ``.venv`` (so outputs do
not land in the checkout), with that environment's ``bin`` first on PATH and no noise key (the
public demo key). ``make
install`` is what made this environment, and ``make run`` is its ``dpsynth run --out
dpsynth-out`` (:data:`MAKE_TARGETS`). Commands that need what a unit test does not have — a
broker, Java, a package index, the shared data sets, a server that runs until stopped — are
listed in :data:`ELSEWHERE` with where they are exercised; a listed command the README no longer
shows fails the test, so the list cannot go stale. The README's Python blocks are doctests.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: The pages whose commands a newcomer types first.
PAGES = (README, ROOT / "docs" / "guide.md")
#: Make targets of the README, as this test runs them (the Makefile's recipes).
MAKE_TARGETS = {"make install": "true", "make run": "dpsynth run --out dpsynth-out"}
#: Part of a command → where it runs instead (a test or make target), or why it cannot here.
ELSEWHERE = {
    "dpsynth view": "tests/unit/test_view.py (a server that runs until stopped)",
    "read_points.py --bootstrap": "tests/integration/test_points_worker.py (a broker)",
    "pip install": "make downstream and make dist install the package from the checkout",
    "dpsynth topics export": "tests/integration/test_topics.py (a broker)",
    "pytest --dpsynth-recording": "make downstream (examples/downstream)",
    "make java-test": "make test runs it (Java 17, Maven)",
    "java -jar": "tests/integration/test_java_reader.py (a broker, Java)",
    "dpsynth run --dataset gowalla": "the shared data set (DPSYNTH_DATA_DIR); "
                                     "tests/unit/test_cli_users.py runs the generated users",
}


def console_blocks(text: str) -> list[list[str]]:
    """The commands of every ``console`` block: ``$`` lines with their continuations."""
    blocks = []
    for body in re.findall(r"```console\n(.*?)```", text, flags=re.DOTALL):
        commands: list[str] = []
        continued = False
        for line in body.splitlines():
            if continued:
                commands[-1] += "\n" + line
            elif line.startswith("$ "):
                commands.append(line[2:])
            else:
                continue
            continued = line.rstrip().endswith("\\")
        blocks.append(commands)
    return blocks


def _runnable(command: str) -> bool:
    return not any(part in command for part in ELSEWHERE)


def _as_run(command: str) -> str:
    for target, recipe in MAKE_TARGETS.items():
        command = re.sub(rf"^{target}\b", recipe, command)
    return command


def test_every_skipped_command_is_still_in_the_readme() -> None:
    commands = [c for page in PAGES for block in console_blocks(page.read_text()) for c in block]
    for part in ELSEWHERE:
        assert any(part in c for c in commands), f"{part!r} left the README and the guide"


def test_the_sample_inputs_are_what_their_script_writes(tmp_path: Path) -> None:
    copy = tmp_path / "examples"
    copy.mkdir()
    shutil.copy(ROOT / "examples" / "make_samples.py", copy)
    subprocess.run([sys.executable, str(copy / "make_samples.py")], check=True)  # noqa: S603
    for name in ("points.csv", "points.schema.json", "checkins.csv", "checkins.schema.json",
                 "adult.csv", "adult.domain.json"):
        assert (copy / name).read_bytes() == (ROOT / "examples" / name).read_bytes(), name


BLOCKS = [b for page in PAGES for b in console_blocks(page.read_text())
          if any(map(_runnable, b))]


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[b[0].split("\\")[0][:60] for b in BLOCKS])
def test_a_readme_console_block_runs_as_written(block: list[str], tmp_path: Path) -> None:
    for folder in ("examples", "schemas"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPSYNTH_NOISE_KEY")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    script = "set -e\n" + "\n".join(_as_run(c) for c in block if _runnable(c)) + "\n"
    result = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env,  # noqa: S603,S607
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{script}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
