"""The layout rule of the developers' guide: a module per concept, at most 400 lines each."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "operators" / "dpsynth"
MAX_LINES = 400


def test_every_module_of_the_package_is_at_most_400_lines() -> None:
    sizes = {path.relative_to(PACKAGE).as_posix(): len(path.read_text().splitlines())
             for path in PACKAGE.rglob("*.py")}
    assert len(sizes) > 100  # the package was found
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert not over, f"split these modules by concept (≤ {MAX_LINES} lines): {over}"
