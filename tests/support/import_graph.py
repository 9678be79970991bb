"""The package's import graph, read from the source with :mod:`ast` (nothing is imported).

Every ``import`` statement of a module counts, wherever it stands: at module level, under
``if TYPE_CHECKING:``, inside a function or a ``try``. A type-only or a deferred import is still a
dependency of the module's concept, and a circle through one is still a circle. Relative imports
are resolved; ``from pkg import name`` is an edge to the module ``pkg.name`` when there is one,
else to ``pkg`` (a name its ``__init__`` defines or re-exports). A module's implicit import of
its parent packages is not an edge (import-linter does not count it either).
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "operators"
PACKAGE = "dpsynth"


def modules(sources: Path = SOURCES, package: str = PACKAGE) -> dict[str, Path]:
    """Dotted module name → its file, for every module and package of ``package``."""
    out: dict[str, Path] = {}
    for path in sorted((sources / package).rglob("*.py")):
        parts = list(path.relative_to(sources).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def import_graph(sources: Path = SOURCES, package: str = PACKAGE) -> dict[str, set[str]]:
    """Module → the modules of ``package`` it imports (every import statement, see above)."""
    files = modules(sources, package)

    def known(name: str) -> str | None:  # the module itself, else its nearest package
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [known(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    origin = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    origin = node.module or ""
                targets = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in files
                           else known(origin) for alias in node.names]
            graph[name].update(t for t in targets
                               if t is not None and t != name
                               and (t == package or t.startswith(package + ".")))
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest circle (``[a, b, …, a]``) through each strongly connected component of more
    than one module (Tarjan's algorithm, iterative); empty when the graph has none."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return [_shortest_circle(graph, component) for component in components]


def _shortest_circle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """The shortest circle through the component's first module (breadth first)."""
    start = min(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for step in sorted(graph[node] & component):
            if step == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start]
            if step not in came_from:
                came_from[step] = node
                queue.append(step)
    raise AssertionError(f"no circle through {start}")  # a component always has one
