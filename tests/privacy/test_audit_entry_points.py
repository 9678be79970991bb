"""The neighbour audit over every library and command entry point (issue 13 item 5, P14).

Each entry point runs D and every neighbour D′ of its notion under the same 100 public audit
keys (key i = SHA-256("dpsynth-audit", 0, i): fixed, so the suite is reproducible) and must
pass: no published field that is constant across the keys on D and on D′ yet differs between
them, and every empirical ε lower bound at most the configured ε. False alarms (docs/privacy.md
P14): a field of an ε-DP output (ε = 1) is flagged with probability ≤ 6.2e-28; an entry point's
ε lower bounds exceed the true loss with probability ≤ 0.01 (Clopper–Pearson, Bonferroni over
its tests).
"""

from __future__ import annotations

import pytest

from dpsynth.audit.entries import library_entries
from dpsynth.audit.runner import audit_entry, audit_keys
from dpsynth.cli.audit import command_entries

pytestmark = pytest.mark.privacy

KEYS = 100
ENTRIES = {entry.name: entry for entry in (*library_entries(), *command_entries())}


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_P14_entry_point_passes_the_neighbour_audit(name: str) -> None:
    report = audit_entry(ENTRIES[name], audit_keys(KEYS))
    assert report.passed, "\n".join(report.lines())
    assert report.keys == KEYS and report.bounds  # the statistics were tested
