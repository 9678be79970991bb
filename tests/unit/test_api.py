"""The public API is what docs/api.md lists: importable, and nothing else in __all__."""

from __future__ import annotations

import re
from pathlib import Path

import dpsynth

ROOT = Path(__file__).resolve().parents[2]


def test_the_documented_api_is_the_package_all() -> None:
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    table = page.split("## Building blocks")[0]
    documented = set(re.findall(r"`([A-Za-z_]+)`", table)) - {"import", "__all__"}
    documented -= {"add", "step", "extend", "tick", "snapshot", "public_config", "points",
                   "neighbours", "privacy_unit", "mechanism"}
    assert documented == set(dpsynth.__all__) == set(dpsynth._PUBLIC)
    for name in dpsynth.__all__:
        assert getattr(dpsynth, name) is not None
    assert "KeyedNoise" not in dpsynth.__all__  # a building block, public in dpsynth.noise
