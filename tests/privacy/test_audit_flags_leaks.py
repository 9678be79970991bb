"""The audit fails the code as it was before issue 13, and passes it as it is (P14).

The leaking entry points of tests/support/leaky.py reproduce the issue's findings on the real
engines: add/remove steps counted in records (with ``release_every`` in the metadata), the
tabular engine's exact ``records_seen``, and — seen by the ε lower bound alone — a size counter
spending 3ε. The commands as they were (``dpsynth tabular run`` and ``dpsynth run`` under
add/remove cut steps of N rows exactly as their replacement modes still do) are audited by
running those modes against add/remove neighbours (20 keys: their differences are exact);
elsewhere 100 fixed keys, as in the suite.
"""

from __future__ import annotations

import dataclasses

import pytest

from dpsynth.audit.runner import audit_entry, audit_keys
from dpsynth.cli.audit import run_entry, tabular_entry
from dpsynth.cli.run import run as run_command
from dpsynth.cli.tabular import tabular as tabular_group
from tests.support.leaky import counted_steps_entry, exact_count_entry, overspent_size_entry

pytestmark = pytest.mark.privacy

KEYS = audit_keys(100)


def _fields(report) -> set[str]:
    return {d.field for d in report.differences}


def test_P14_steps_counted_in_records_fail() -> None:
    report = audit_entry(counted_steps_entry(), KEYS)
    assert not report.passed
    assert "releases" in _fields(report)  # 120 records make 12 steps, 119 make 11
    assert any(d.field.endswith("metadata.step") for d in report.differences)


def test_P14_an_exact_count_in_the_metadata_fails() -> None:
    report = audit_entry(exact_count_entry(), KEYS)
    assert not report.passed
    assert any(f.endswith("metadata.records_seen") for f in _fields(report))


def test_P14_an_overspent_size_counter_fails_on_its_epsilon_lower_bound() -> None:
    report = audit_entry(overspent_size_entry(), KEYS)
    assert not report.differences  # no field is deterministic: the noise hides it from (a)
    assert report.epsilon_lower > report.epsilon and not report.passed


@pytest.mark.parametrize("entry", [run_entry(run_command, "replace"),
                                   tabular_entry(tabular_group, "replace")],
                         ids=["dpsynth run", "dpsynth tabular run"])
def test_P14_commands_with_steps_of_n_records_fail_under_add_remove(entry) -> None:
    """Before issue 13, add/remove runs of the commands made a step every N records — what
    their replacement modes do now; audited against add/remove neighbours they fail."""
    as_before = dataclasses.replace(entry, name=entry.name + " as add/remove",
                                    notion="add_remove")
    report = audit_entry(as_before, KEYS[:20])  # a deterministic difference: 20 keys show it
    assert not report.passed
    assert "releases" in _fields(report) or "files" in _fields(report)


def test_P14_the_fixed_code_passes() -> None:
    """The same engines driven on the public clock pass (the full suite audits every entry
    point; this is the counterpart of the leaks above in one place)."""
    from dpsynth.audit.entries import online_entry
    from dpsynth.audit.entries import tabular_entry as library_tabular

    for entry in (online_entry("adaptive", "add_remove"), library_tabular("add_remove")):
        report = audit_entry(entry, KEYS)
        assert report.passed, "\n".join(report.lines())
