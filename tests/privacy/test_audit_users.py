"""The neighbour audit at the privacy unit "user" (issue 16, docs/privacy.md P15).

D holds one heavy user (100 records in the first step, 2 in each later one, all at a corner no
other record comes near) among users of one record; the neighbour removes (add/remove) or moves
(replace) every record of that user. The library's user-level entry points must pass at
user-level ε = 1 with k = 4: no deterministic difference, every ε lower bound ≤ 1, with the
audit's false-alarm rates (docs/privacy.md P14). And the audit must have the power to see a
missing bound: the same mechanism at ε/k per record without bounding fails.
"""

from __future__ import annotations

import pytest

from dpsynth.audit.entries import AUDIT_MAX_DEPTH, EntryPoint, Output, point_releases_output
from dpsynth.audit.inputs import AuditInput
from dpsynth.audit.measures import release_statistics
from dpsynth.audit.runner import audit_entry, audit_keys
from dpsynth.audit.users import (
    AUDIT_K,
    LONE_RECORDS,
    user_entries,
    user_input,
    user_neighbours,
)
from dpsynth.online.synthesizer import OnlineSynthesizer

pytestmark = pytest.mark.privacy

KEYS = 100
ENTRIES = {entry.name: entry for entry in user_entries()}


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
    for name in ("library:guided:add_remove:user", "library:adaptive:add_remove:user"):
        runs = [ENTRIES[name].run(case, key) for case in (data, lone.data)]
        assert [r.fields["releases"] for r in runs] == [len(data.steps)] * 2


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
