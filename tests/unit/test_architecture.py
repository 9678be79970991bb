"""docs/architecture.md is true to the code: its table names every module of the package, and
every module it names exists (a module added, moved or removed without the page fails here);
its layer diagram is the import contract that CI enforces, layer by layer."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operators" / "dpsynth"


def _table() -> dict[str, set[str]]:
    """Row (a top-level module, or a package ending in ``/``) → the modules its cell names."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page.split("## Where each concept lives")[1].split("\n## ")[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        match = re.match(r"\| `([a-z_]+/?)` \| (.*) \|$", line)
        if match:
            rows[match.group(1)] = set(re.findall(r"`([a-z_0-9]+)`", match.group(2)))
    return rows


def _code() -> dict[str, set[str]]:
    """The same shape, from the files."""
    out: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.iterdir()):
        if path.suffix == ".py" and path.stem not in ("__init__", "__main__", "_types"):
            out[path.stem] = set()
        elif path.is_dir() and (path / "__init__.py").exists() and path.name != "__pycache__":
            out[path.name + "/"] = {p.stem for p in path.rglob("*.py")  # subpackages too
                                    if p.stem not in ("__init__", "__main__")}
    return out


def test_the_module_table_names_every_module_and_only_those() -> None:
    table, code = _table(), _code()
    assert set(table) == set(code), "rows of docs/architecture.md vs the package"
    for row, modules in code.items():
        missing = modules - table[row]
        assert not missing, f"docs/architecture.md row {row} lacks {sorted(missing)}"


def test_the_layer_diagram_is_the_import_contract() -> None:
    """The diagram's rows, top to bottom, are the layers contract's layers in pyproject.toml
    (which tests/unit/test_layout.py holds to every folder): the picture cannot drift from the
    rule that import-linter enforces."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    diagram = page.split("## The import rule")[1].split("```")[1]
    drawn = [tuple(re.split(r"\s*[|:]\s*", m.group(1).strip()))
             for m in re.finditer(r"^  ([a-z_]+(?:\s*[|:]\s*[a-z_]+)*)", diagram, re.MULTILINE)]
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"]
                    if c["type"] == "layers")
    declared = [tuple(name.strip().removeprefix("dpsynth.") for name in re.split(r"[|:]", layer))
                for layer in contract["layers"]]
    assert drawn == declared
