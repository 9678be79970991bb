"""The layout rule of the developers' guide: a module per concept, every folder in a layer.

What guards the layout, and where:

- **layers** — every subpackage and every top-level module of ``dpsynth`` is named in the
  import-linter *layers* contract of ``pyproject.toml`` (the leaves too, as its lowest layer), so
  a new folder or module cannot escape the layer rule: checked here. That no module imports
  from a layer above its own, and that the DP core imports no adapter, Kafka, Faust, pydantic
  or weak randomness, is import-linter's job (``make lint``: the *layers* and *forbidden*
  contracts), not repeated here;
- **no import circle**, type-only and function-local imports included:
  ``tests/unit/test_import_graph.py``;
- **every module has its row** in docs/architecture.md's "Where each concept lives":
  ``tests/unit/test_architecture.py``.

Size: modules are split by concept, never to meet a number (a pair split to fit a line cap
needed each other: an import circle). The only size guard left is a generous tripwire: a module
over :data:`LARGE` lines most likely holds more than one concept. Split it by concept; if it is
one concept, name it in :data:`ONE_CONCEPT` with the reason instead.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operators" / "dpsynth"
#: Lines above which a module is presumed to hold more than one concept (a tripwire, no target).
LARGE = 800
#: Modules allowed above LARGE: module path (relative to the package) → why it is one concept.
ONE_CONCEPT: dict[str, str] = {}


def _layer_names() -> set[str]:
    """Every module named in the layers contract (``|``: independent, ``:``: siblings)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers")
    return {name.strip() for layer in layers for name in re.split(r"[|:]", layer)}


def _top_level() -> set[str]:
    """``dpsynth.<name>`` for every subpackage and top-level module but the package's own."""
    names = {f"dpsynth.{path.name}" for path in PACKAGE.iterdir()
             if path.is_dir() and (path / "__init__.py").exists()}
    names |= {f"dpsynth.{path.stem}" for path in PACKAGE.glob("*.py")
              if path.stem not in ("__init__", "__main__")}
    return names


def test_every_folder_and_module_of_the_package_is_in_a_layer() -> None:
    named, present = _layer_names(), _top_level()
    assert len(present) > 20  # the package was found
    missing = sorted(present - named)
    assert not missing, ("name these in the layers contract of pyproject.toml "
                         f"([tool.importlinter], by what they import): {missing}")
    stale = sorted(named - present)
    assert not stale, f"the layers contract names what no longer exists: {stale}"


def test_no_module_is_large_without_a_reason() -> None:
    sizes = {path.relative_to(PACKAGE).as_posix(): len(path.read_text().splitlines())
             for path in PACKAGE.rglob("*.py")}
    assert len(sizes) > 100  # the package was found
    large = {name: lines for name, lines in sizes.items()
             if lines > LARGE and name not in ONE_CONCEPT}
    assert not large, (f"modules over {LARGE} lines: split each by concept, or name it in "
                       f"ONE_CONCEPT with the reason it is one: {large}")
    assert set(ONE_CONCEPT) <= set(sizes), "ONE_CONCEPT names a module that no longer exists"
