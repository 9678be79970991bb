"""The package has no import circle, not even through a type-only or a function-local import.

The graph is read from the source (:mod:`tests.support.import_graph`): every ``import`` of a
module counts, at module level, under ``if TYPE_CHECKING:`` or inside a function. Two modules
that need each other are one concept (merge them) or share something that belongs lower (move
it there, or invert the dependency); a deferred or type-only import only hides the circle.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.import_graph import circles, import_graph, modules


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph()
    assert len(graph) > 100  # the package was found
    found = circles(graph)
    assert not found, "import circles (merge the modules, or move what they share lower):\n" + \
        "\n".join("  " + " → ".join(circle) for circle in found)


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_type_only_or_a_function_local_import_closes_a_circle(tmp_path: Path) -> None:
    sources = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg.b import B\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import C\n",
        "c.py": "def f():\n    from . import a\n",
        "d.py": "import pkg.a\nfrom pkg import e\n",
        "e.py": "",
    })
    graph = import_graph(sources, "pkg")
    assert set(modules(sources, "pkg")) == {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d", "pkg.e"}
    assert graph["pkg.c"] == {"pkg.a"} and graph["pkg.d"] == {"pkg.a", "pkg.e"}
    assert circles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
    graph["pkg.c"].clear()
    assert circles(graph) == []
