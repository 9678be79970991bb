"""Every draw the package makes has a scale test in every regime it runs in (issue 44).

The registry ``benchmarks.draws`` lists each (draw × path × mechanism) with the aimed tests that
check its scale, the ε at which they run it, and the mutant that overspends that path
(docs/privacy.md P14 "Every draw, every path"). Here every mechanism runs — the online ones at
d = 1, 2, 3 under both notions, offline PMM, PSMM and lowdim, the tabular engine with its three
selections — at ε from 0.1 to 10⁴, a spy noting every keyed draw of any kind (both Lap_Z forms,
both PrivTree descents, geometric and uniform draws). The test fails when:

- a draw matches no row (a new draw or a new path, e.g. a sparse form, added without a scale
  test) or two rows;
- a row is never drawn (a stale row);
- a row's tests do not run it at the smallest and at the largest ε of the grid where it occurs
  (``at`` must hold both), or a test is not parametrised at an ε the row claims;
- a row's mutant is missing, aims at another path, or is not aimed by the row's tests.

Deterministic: no false alarm.
"""

from __future__ import annotations

import importlib
from collections import defaultdict

import numpy as np
import pytest

from benchmarks.draws import DRAWS, Draw, classify, markdown
from benchmarks.mutants import BY_NAME, DENSE_DESCENT, RARE_DESCENT
from benchmarks.seams import Argument, Draws, holds
from dpsynth.offline.lowdim import lowdim_release
from dpsynth.offline.pmm import pmm_leaves
from dpsynth.offline.psmm import psmm_measure
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.synthesizer import TabularSynthesizer
from tests.support.spies import keyed_draws

__all__ = ["keyed_draws"]  # fixture

pytestmark = pytest.mark.statistical

KEY = bytes(range(32))
#: ε of the enumeration: the smallest a user runs, the default, where sparse forms start,
#: where guided refines, the largest. ``paper`` runs up to 10 (it refuses more).
GRID = (0.1, 1.0, 8.0, 100.0, 1e4)
PAPER_GRID = (0.1, 1.0, 10.0)
DOMAIN = Domain.from_dict({"version": 1, "attributes": [
    {"name": "a", "size": 3}, {"name": "b", "size": 3}, {"name": "c", "size": 2}]})


def _online(mechanism: str, epsilon: float) -> None:
    for d in (1, 2, 3):
        points = np.random.default_rng(5).random((24 * 40, d))  # public test data
        if mechanism == "paper":
            OnlineSynthesizer(d, epsilon, KEY, 40, "paper", 6).extend(points[:3000])
            continue
        for notion in ("replace", "add_remove"):
            synth = OnlineSynthesizer(d, epsilon, KEY, 40, mechanism, 8, neighbours=notion)
            for step in range(24):  # blocks 0-3 closed, block 4 open with its time nodes
                synth.add(points[step * 40:(step + 1) * 40])
                synth.step()


def _offline(epsilon: float) -> None:
    points = np.random.default_rng(7).random((300, 2))
    for notion in ("replace", "add_remove"):
        pmm_leaves(points, epsilon, KEY, neighbours=notion)
        psmm_measure(points, epsilon, KEY, neighbours=notion)
    lowdim_release(np.random.default_rng(8).random((600, 3)), epsilon, KEY, 2,
                   neighbours="replace")


def _tabular(epsilon: float) -> None:
    codes = np.random.default_rng(8).integers(0, 2, (100, 3))
    for notion in ("replace", "add_remove"):
        for mechanism, selection in (("proposed", "cyclic"), ("proposed", "em"),
                                     ("baseline", "em")):
            synth = TabularSynthesizer(DOMAIN, epsilon, KEY, release_every=20,
                                       mechanism=mechanism, workloads_per_step=3,
                                       neighbours=notion, selection=selection)
            for step in range(5):
                synth.add(codes[step * 20:(step + 1) * 20])
                synth.step()


def test_every_draw_has_a_row_tested_at_its_smallest_and_largest_epsilon(keyed_draws) -> None:
    """Each keyed draw of the enumeration matches exactly one row; every row is drawn; and a
    row's tests run it at the smallest and at the largest ε of the grid where it occurs."""
    observed: dict[Draw, set[float]] = defaultdict(set)
    unknown = set()
    for epsilon, enumerate_at in [*((e, _enumerate_at) for e in GRID),
                                  *((e, _paper_at) for e in PAPER_GRID)]:
        keyed_draws.clear()
        enumerate_at(epsilon)
        for form, context in keyed_draws:
            rows = classify(form, context)
            if len(rows) == 1:
                observed[rows[0]].add(epsilon)
            else:
                unknown.add((form, tuple("#" if isinstance(c, int) else c for c in context),
                             len(rows)))
    assert not unknown, (
        "draws with no row (or several) in benchmarks/draws.py — add a row naming a scale "
        f"test that runs this path at its smallest and largest ε, and its mutant: {unknown}")
    stale = [row for row in DRAWS if row not in observed]
    assert not stale, f"rows never drawn (stale: remove them or fix their labels): {stale}"
    for row, epsilons in observed.items():
        if row.mutant is not None:  # a public draw has no scale to test
            assert min(epsilons) in row.at and max(epsilons) in row.at, (
                row.mechanism, row.component, row.form, sorted(epsilons), row.at)


def _enumerate_at(epsilon: float) -> None:
    _online("adaptive", epsilon)
    _online("guided", epsilon)
    _offline(epsilon)
    _tabular(epsilon)


def _paper_at(epsilon: float) -> None:
    _online("paper", epsilon)


def _parametrised_epsilons(test: str) -> set[float]:
    """The ε at which a test id's function is parametrised (its "epsilon" values), read from
    its pytest marks; a test without such a parameter runs at its module's EPSILON."""
    path, _, name = test.partition("::")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    function = getattr(module, name.split("[")[0])
    values: set[float] = set()
    for mark in getattr(function, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names = [n.strip() for n in mark.args[0].split(",")]
        if "epsilon" not in names:
            continue
        where = names.index("epsilon")
        for case in mark.args[1]:
            case = getattr(case, "values", case)
            values.add(float(case[where] if len(names) > 1 else case))
    return values or {float(getattr(module, "EPSILON", 1.0))}


def test_every_row_names_tests_parametrised_at_its_epsilons_and_its_mutant() -> None:
    """Each ε a row claims is one at which one of its tests runs, and its mutant aims at its
    path (the same labels and form) and is aimed by one of its tests."""
    for row in DRAWS:
        if row.mutant is None:
            assert row.argument and not row.tests and row.form == "uniform", row
            continue
        assert row.tests and row.at, row
        covered = set().union(*(_parametrised_epsilons(t) for t in row.tests))
        assert set(row.at) <= covered, (row.component, row.form, row.at, sorted(covered))
        mutant = BY_NAME[row.mutant]
        assert set(t.split("[")[0] for t in mutant.tests) & set(row.tests), (row, mutant.tests)
        seam = mutant.seam
        if isinstance(seam, Draws):  # a seam of both forms fits a draw with one path only
            paths = {other.form for other in DRAWS if other.labels == row.labels}
            assert seam.form == row.form or (seam.form is None and paths == {row.form}), (
                row, seam)
            assert holds(row.labels, seam.labels), (row, seam)
        elif row.form.startswith("descent"):
            descent = {"descent: dense": DENSE_DESCENT, "descent: rare": RARE_DESCENT}
            assert isinstance(seam, Argument) and seam.only is descent[row.form], (row, seam)
            assert seam.when is not None and seam.when[0] == row.mechanism, (row, seam)


def test_the_privacy_doc_shows_the_registry() -> None:
    """docs/privacy.md's table of draws × paths × mechanisms is the registry's, as printed by
    ``python -m benchmarks draws``."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "privacy.md").read_text()
    assert markdown() in doc, "regenerate the table: python -m benchmarks draws"
