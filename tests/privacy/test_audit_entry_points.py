"""The neighbour audit over every library and command entry point (issue 13 item 5, P14).

Each entry point runs D and every neighbour D′ of its notion under the same 100 public audit
keys (key i = SHA-256("dpsynth-audit", 0, i): fixed, so the suite is reproducible) and must
pass: no published field that is constant across the keys on D and on D′ yet differs between
them, and every empirical ε lower bound at most the configured ε. False alarms (docs/privacy.md
P14): a field of an ε-DP output (ε = 1) is flagged with probability ≤ 6.2e-28; an entry point's
ε lower bounds exceed the true loss with probability ≤ 0.01 (Clopper–Pearson, Bonferroni over
its tests). The ``:refined`` entries run guided at a per-record ε where its paid refinement runs
(36 add/remove, 64 replace): there (a) judges every field but the noisy outputs, which an ε-DP
output that large may hold constant per input, and (b) cannot reach ε (docs/privacy.md P14).
"""

from __future__ import annotations

import pytest

from dpsynth.audit.entries import library_entries, refined_entry
from dpsynth.audit.inputs import neighbours
from dpsynth.audit.runner import audit_entry, audit_keys
from dpsynth.cli.audit import command_entries
from dpsynth.online.guided import pipeline

pytestmark = pytest.mark.privacy

KEYS = 100
ENTRIES = {entry.name: entry for entry in (*library_entries(), *command_entries())}


#: The refined entries judge public fields only (their noisy outputs are not judged at ε ≥ 36
#: and no bound can reach ε): 20 keys show the same, in a fifth of the time.
REFINED_KEYS = 20


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_P14_entry_point_passes_the_neighbour_audit(name: str) -> None:
    keys = REFINED_KEYS if name.endswith(":refined") else KEYS
    report = audit_entry(ENTRIES[name], audit_keys(keys))
    assert report.passed, "\n".join(report.lines())
    assert report.keys == keys and report.bounds  # the statistics were tested


@pytest.mark.parametrize("notion", ["add_remove", "replace"])
def test_P16_the_refined_entries_run_the_paid_refinement(monkeypatch: pytest.MonkeyPatch,
                                                         notion: str) -> None:
    """The refined entries audit guided's paid refinement: on D and on every neighbour, block
    0's summary (the first step, which the neighbours change) draws a PrivTree and counts at
    what it leaves (a spy on the seam); the entries at ε = 1 refine nothing."""
    calls: list[tuple[tuple, bool]] = []
    real = pipeline.refined_partition

    def spy(records, depths, prefixes, epsilon, noise, context, *, max_depth):  # type: ignore[no-untyped-def]
        out = real(records, depths, prefixes, epsilon, noise, context, max_depth=max_depth)
        calls.append((tuple(context), out[2] < epsilon))
        return out

    monkeypatch.setattr(pipeline, "refined_partition", spy)
    key = audit_keys(1)[0]
    entry = refined_entry(notion)
    data = entry.input()
    for case in (data, *(pair.data for pair in neighbours(data, notion))):
        calls.clear()
        entry.run(case, key)
        assert any(refined and context[-2:] == ("block", 0) for context, refined in calls)
    calls.clear()
    ENTRIES[f"library:guided:{notion}"].run(data, key)
    assert calls and not any(refined for _, refined in calls)
