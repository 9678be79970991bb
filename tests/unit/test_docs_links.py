"""Documents cite what exists: every relative Markdown link of the repository's pages, and every
``docs/…md`` path, design id (D1…), algorithm id (A.x, C.x, S.x, E.x) and decision record named
in the package or the docs, resolves to a file and, for an anchor or an id, to a heading there.
No package module cites the design notes that live outside the repository (``../shared/specs``).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operators" / "dpsynth"
SKIP_DIRS = {".git", ".venv", "node_modules", "target", "build", "dist", ".mypy_cache",
             ".pytest_cache", ".ruff_cache"}

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
DOC_PATH = re.compile(r"(?<![\w/.-])((?:\.\./)?docs/[\w./-]+?\.md)(?:#([\w-]+))?")
DECISION = re.compile(r"docs/decisions/(\d{4})\b")
DESIGN_ID = re.compile(r"design(?:\.md)? (D\d+)\b")
ALGORITHM_ID = re.compile(r"algorithms(?:\.md)?,? ([ACSE]\.\d+(?:\.\d+)*)\b")
#: The external notes the package must not cite (their content is in docs/design.md and
#: docs/algorithms.md). ``../shared/data`` — the data sets' directory — is a runtime default.
EXTERNAL = re.compile(r"shared/specs|shared/papers|DESIGN §|STYLE §|spec C\.\d|spec A\.\d|"
                      r"spec §|reference-numbers|accuracy-study §|paper-online-synthesis|"
                      r"peer-phdstream")


def _files(pattern: str) -> list[Path]:
    return sorted(p for p in ROOT.rglob(pattern)
                  if not SKIP_DIRS.intersection(p.relative_to(ROOT).parts))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown page: its headings' slugs (GitHub numbers repeats) and any
    explicit ``id``/``name`` attributes."""
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    seen: dict[str, int] = {}
    out = set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, flags=re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def headings(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    return "\n".join(re.findall(r"^#{1,6}\s+(.+)$", text, flags=re.M))


def _check_link(source: Path, target: str) -> str | None:
    if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
        return None
    path_part, _, anchor = target.partition("#")
    dest = (source.parent / path_part).resolve() if path_part else source
    if not dest.exists():
        return f"{_rel(source)}: link to {target} (no such file)"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{_rel(source)}: link to {target} (no such heading)"
    return None


def test_every_relative_markdown_link_resolves() -> None:
    broken = []
    for page in _files("*.md"):
        for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
            problem = _check_link(page, target)
            if problem:
                broken.append(problem)
    assert broken == []


def _citing_files() -> list[Path]:
    return [*_files("operators/dpsynth/**/*.py"), *_files("docs/**/*.md"),
            ROOT / "README.md", ROOT / "CONTRIBUTING.md"]


def test_every_docs_path_and_id_named_resolves() -> None:
    design = headings(ROOT / "docs" / "design.md")
    algorithms = headings(ROOT / "docs" / "algorithms.md")
    decisions = {p.name[:4] for p in (ROOT / "docs" / "decisions").glob("[0-9]*.md")}
    broken = []
    for source in _citing_files():
        text = source.read_text(encoding="utf-8")
        for path, anchor in DOC_PATH.findall(text):
            dest = (source.parent / path) if path.startswith("..") else ROOT / path
            if not dest.exists():
                broken.append(f"{_rel(source)}: {path}")
            elif anchor and anchor not in anchors(dest):
                broken.append(f"{_rel(source)}: {path}#{anchor}")
        broken += [f"{_rel(source)}: decision {n}" for n in DECISION.findall(text)
                   if n not in decisions]
        broken += [f"{_rel(source)}: design {d}" for d in DESIGN_ID.findall(text)
                   if not re.search(rf"^{d}\. ", design, flags=re.M)]
        broken += [f"{_rel(source)}: algorithms {a}" for a in ALGORITHM_ID.findall(text)
                   if not re.search(rf"^{re.escape(a)} ", algorithms, flags=re.M)]
    assert broken == []


def test_no_package_module_cites_the_external_design_notes() -> None:
    citing = {_rel(p) for p in _files("operators/dpsynth/**/*.py")
              if EXTERNAL.search(p.read_text(encoding="utf-8"))}
    assert citing == set()
