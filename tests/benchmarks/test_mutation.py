"""The mutation check's own parts (benchmarks/mutants.py, seams.py): every mutant names a seam
that exists and tests that exist, and a seam that moved fails loudly (issue 25)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.mutants import FALSE_ALARM, MUTANTS
from benchmarks.seams import Argument, Result, SeamError, check, holds, times

ROOT = Path(__file__).resolve().parents[2]


def test_every_seam_exists_and_every_aimed_test_is_named_with_its_false_alarm_rate() -> None:
    for mutant in MUTANTS:
        check(mutant.seam)
        for test in mutant.tests:
            path, _, name = test.partition("::")
            assert f"def {name.split('[')[0]}(" in (ROOT / path).read_text(), test
            assert name.split("[")[0] in FALSE_ALARM, test


def test_every_aimed_test_case_is_collected() -> None:
    """A case id (``test[…]``) names a case pytest collects: a new parameter changes the ids,
    and the mutation command would stop on a vanished one (pytest collects, runs nothing)."""
    cases = {t for m in MUTANTS for t in m.tests if "[" in t}
    files = sorted({t.partition("::")[0] for t in cases})
    collected = subprocess.run(  # noqa: S603 - our interpreter, our tests
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly",
         "-o", "addopts=", "-p", "no:cacheprovider", *files],
        cwd=ROOT, capture_output=True, text=True, check=False).stdout.split()
    assert not cases - set(collected), sorted(cases - set(collected))


def test_a_seam_that_moved_fails_loudly() -> None:
    with pytest.raises(SeamError, match="does not exist"):
        check(Argument("dpsynth.online.guided.mechanism:GuidedMechanism._no_such", "x",
                       times(4), "× 4"))
    with pytest.raises(SeamError, match="no argument"):
        check(Argument("dpsynth.offline.pmm:pmm_scales", "budget", times(4), "× 4"))
    with pytest.raises(SeamError, match="does not exist"):
        check(Result("dpsynth.no_such_module:f", lambda r, _: r, "same"))


def test_noise_addresses_match_labels_in_order() -> None:
    context = ("dpsynth", "partition", 0, "guided", "node", 4, 1, 0, "leaf")
    assert holds(context, ("guided", "node", "leaf"))
    assert not holds(context, ("leaf", "guided")) and not holds(context, ("block",))
