"""The neighbour audit at the privacy unit "user" (issue 16, docs/privacy.md P15).

D holds one heavy user (100 records in the first step, 2 in each later one, all at a corner no
other record comes near) among users of one record; the neighbour removes (add/remove) or moves
(replace) every record of that user. The library's user-level entry points and ``dpsynth run
--privacy-unit user`` (``cli:run:*:user``, issue 44) must pass at user-level ε = 1 with k = 4:
no deterministic difference, every ε lower bound ≤ 1, at 100 keys with the audit's false-alarm
rates (docs/privacy.md P14: a field of an ε-DP output is flagged with probability ≤ 6.2e-28, an
entry's ε lower bounds exceed the true loss with probability ≤ 0.01). And the audit must have
the power to see a missing bound: the same mechanism at ε/k per record without bounding fails,
in the library and through the command.
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

from dpsynth.audit.entries import AUDIT_MAX_DEPTH, EntryPoint, Output, point_releases_output
from dpsynth.audit.inputs import AuditInput
from dpsynth.audit.measures import release_statistics
from dpsynth.audit.runner import audit_entry, audit_keys
from dpsynth.audit.users import (
    AUDIT_K,
    HEAVY,
    HEAVY_FIRST,
    HEAVY_PER_STEP,
    LONE,
    LONE_RECORDS,
    user_entries,
    user_input,
    user_neighbours,
)
from dpsynth.cli.audit import USER_COLUMN, run_entry, user_command_entries, write_points
from dpsynth.cli.run import run as run_command
from dpsynth.online.synthesizer import OnlineSynthesizer

pytestmark = pytest.mark.privacy

KEYS = 100
ENTRIES = {entry.name: entry for entry in (*user_entries(), *user_command_entries())}


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_P15_user_level_entry_point_passes_the_neighbour_audit(name: str) -> None:
    report = audit_entry(ENTRIES[name], audit_keys(KEYS))
    assert report.passed, "\n".join(report.lines())
    assert report.pairs == [p.name for p in user_neighbours(user_input(), report.notion)]


def test_P15_the_lone_user_neighbour_leaves_an_empty_step_that_still_releases() -> None:
    """Among the add/remove neighbours, the lone user's removal empties the last step; the
    entry points release for it as for any step (issue 25: it once crashed)."""
    data = user_input()
    lone = user_neighbours(data, "add_remove")[1]
    assert len(data.steps[-1]) == LONE_RECORDS and len(lone.data.steps[-1]) == 0
    assert len(lone.data.steps) == len(data.steps) and lone.step == len(data.steps)
    key = audit_keys(1)[0]
    for name in ("library:guided:add_remove:user", "library:adaptive:add_remove:user",
                 "cli:run:add_remove:user"):
        runs = [ENTRIES[name].run(case, key) for case in (data, lone.data)]
        assert [r.fields["releases"] for r in runs] == [len(data.steps)] * 2


def _rows(tmp_path: Path, name: str, data: AuditInput) -> list[dict[str, str]]:
    """The rows of the CSV ``dpsynth run`` reads for ``data`` (the entries' own writer)."""
    path, _ = write_points(tmp_path / f"{name}.csv", data)
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("notion", ["add_remove", "replace"])
def test_P15_the_command_reads_neighbours_that_differ_in_a_whole_user(
        tmp_path: Path, notion: str) -> None:
    """The CSV the ``cli:run:*:user`` entries hand the command: D holds the heavy user's 122
    corner records under its id in the user column; each neighbour's CSV has every one of them
    removed (add/remove) or moved off the corner under the same id (replace), the lone user
    removed with its rows (add/remove), and is otherwise D's file."""
    data = user_input()
    d = _rows(tmp_path, "D", data)
    heavy = [r for r in d if r[USER_COLUMN] == HEAVY]
    corner = {(r["x0"], r["x1"]) for r in heavy}
    assert len(heavy) == HEAVY_FIRST + HEAVY_PER_STEP * (len(data.steps) - 2)
    assert len(corner) == 1 and not any((r["x0"], r["x1"]) in corner
                                        for r in d if r[USER_COLUMN] != HEAVY)
    assert len([r for r in d if r[USER_COLUMN] == LONE]) == LONE_RECORDS
    for pair in user_neighbours(data, notion):
        rows = _rows(tmp_path, pair.name.replace(" ", "-"), pair.data)
        assert rows != d
        if notion == "replace":
            moved = [r for r in rows if r[USER_COLUMN] == HEAVY]
            assert len(moved) == len(heavy) and not any((r["x0"], r["x1"]) in corner
                                                        for r in rows)
            assert [r for r in rows if r[USER_COLUMN] != HEAVY] == \
                [r for r in d if r[USER_COLUMN] != HEAVY]
            continue
        gone = HEAVY if "heaviest" in pair.name else LONE
        assert not any(r[USER_COLUMN] == gone for r in rows)
        assert rows == [r for r in d if r[USER_COLUMN] != gone]


def test_P15_the_audit_sees_a_user_counted_beyond_k() -> None:
    """Without bounding (ε/k per record, every record counted) the heavy user costs far more
    than ε: the audit fails it."""

    def run(data: AuditInput, key: bytes) -> Output:
        synth = OnlineSynthesizer(2, 1.0 / AUDIT_K, key, 10, "adaptive", AUDIT_MAX_DEPTH,
                                  neighbours="add_remove")
        releases = []
        for step in data.steps:
            synth.add(step)
            releases.append(synth.step())
        return point_releases_output(releases, key)

    leaky = EntryPoint("unbounded", "add_remove", user_input, run, release_statistics,
                       pairs=lambda data: user_neighbours(data, "add_remove"))
    report = audit_entry(leaky, audit_keys(KEYS))
    assert not report.passed and report.epsilon_lower > 1.0, "\n".join(report.lines())


def test_P15_the_audit_sees_the_command_count_a_user_beyond_k() -> None:
    """``dpsynth run`` on the same CSV (user column and all) per record at ε/k, claimed as
    user-level ε (a command that ignored ``--privacy-unit user``): the audit fails it through
    the command, on the heavy user's removal (add/remove; measured 2026-12-03: ε ≥ 1.78,
    mass@change separates 50/50 against 0/50)."""
    bounded = ENTRIES["cli:run:add_remove:user"]
    leaky = dataclasses.replace(run_entry(run_command, "add_remove", epsilon=1.0 / AUDIT_K),
                                name="cli unbounded", epsilon=bounded.epsilon,
                                input=bounded.input, pairs=bounded.pairs)
    report = audit_entry(leaky, audit_keys(KEYS))
    assert not report.passed and report.epsilon_lower > 1.0, "\n".join(report.lines())
