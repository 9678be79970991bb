"""docs/privacy.md's account of the audit's entry points matches the registry (issue 44).

The registry is what ``dpsynth audit --list`` prints (:func:`dpsynth.cli.audit.all_entries`).
P14 "The audit" states how many entry points it lists and how many ``dpsynth audit`` runs
without patterns (and which patterns those are); its audit table and P15's hold one row per
entry point. Every count stated is checked against the registry, every table row must name a
registered entry point with its notion and ε, and every registered entry point must have a row:
the user-level ones (``…:user``) in P15's table, the others in P14's. Deterministic: no
statistics, no runs.
"""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from dpsynth.cli import main
from dpsynth.cli.audit import DEFAULT_PATTERNS, all_entries, selected

PRIVACY = Path(__file__).resolve().parents[2] / "docs" / "privacy.md"
#: A table row of the audit: the entry point (in backticks), its notion, keys, deterministic
#: differences, ε lower bound, certifiable, ε and verdict.
ROW = re.compile(r"^\| `(?P<name>[^`]+)` \| (?P<notion>[a-z_]+) \| (?P<keys>\d+) \| [^|]+ \| "
                 r"[^|]+ \| [^|]+ \| (?P<epsilon>[\d.]+) \| [^|]+ \|$", re.MULTILINE)


def _section(text: str, start: str, end: str) -> str:
    """The text from the heading ``start`` to the heading ``end`` (both must exist)."""
    begin = text.index(start)
    return text[begin:text.index(end, begin)]


def _docs() -> tuple[str, str]:
    """(P14's "The audit" subsection, P15)."""
    text = PRIVACY.read_text(encoding="utf-8")
    return (_section(text, "\n### The audit (", "\n### The mutation check"),
            _section(text, "\n## P15 ", "\n## P16 "))


def _rows(section: str) -> dict[str, re.Match[str]]:
    rows: dict[str, re.Match[str]] = {}
    for row in ROW.finditer(section):
        assert row["name"] not in rows, f"{row['name']}: two rows"
        rows[row["name"]] = row
    return rows


def test_P14_the_stated_counts_are_the_registry_s() -> None:
    """"names them all (N)" is the number of entry points ``--list`` prints; "(`library:*`,
    `cli:*`: M)" names the default patterns and the number of entry points they select."""
    audit, _ = _docs()
    names = [entry.name for entry in all_entries()]
    listing = CliRunner().invoke(main, ["audit", "--list"])
    assert listing.exit_code == 0 and listing.output.split() == names
    listed = re.findall(r"`dpsynth audit\s+--list` names them all \((\d+)\)", audit)
    assert listed == [str(len(names))], f"P14 states {listed}; --list prints {len(names)}"
    default = re.findall(r"without patterns runs [^(]*\(((?:`[^`]+`,\s+)*`[^`]+`):\s+(\d+)\)",
                         audit)
    assert len(default) == 1, "P14 states what `dpsynth audit` runs without patterns once"
    patterns, count = default[0]
    assert tuple(re.findall(r"`([^`]+)`", patterns)) == DEFAULT_PATTERNS
    assert int(count) == len(selected(all_entries(), DEFAULT_PATTERNS))


def test_P14_P15_every_entry_point_has_one_row_and_every_row_an_entry_point() -> None:
    """P14's table holds the record-level entry points, P15's the user-level ones; each row's
    notion and ε are the entry point's."""
    audit, users = _docs()
    record_rows, user_rows = _rows(audit), _rows(users)
    entries = {entry.name: entry for entry in all_entries()}
    assert sorted(record_rows) == sorted(n for n in entries if not n.endswith(":user"))
    assert sorted(user_rows) == sorted(n for n in entries if n.endswith(":user"))
    for name, row in {**record_rows, **user_rows}.items():
        entry = entries[name]
        assert (row["notion"], float(row["epsilon"])) == (entry.notion, entry.epsilon), name
