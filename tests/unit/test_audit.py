"""The neighbour audit's parts (issue 13 item 5, docs/privacy.md P14): intervals, the held-out
ε lower bound (its false-alarm rate and power on randomized response, a mechanism whose loss is
known exactly), deterministic differences, flattening, the probe statistics, the neighbours and
the command's wiring."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats

from dpsynth.audit.fields import deterministic_differences, false_alarm_bound, flatten
from dpsynth.audit.inputs import neighbours, point_input, table_input
from dpsynth.audit.measures import cell_mass, points_mass
from dpsynth.audit.stats import clopper_pearson, held_out_bound, max_certifiable
from dpsynth.cli import main
from dpsynth.release import Release


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (10, 10), (37, 100), (50, 50)])
def test_clopper_pearson_inverts_the_binomial_tails(k, n) -> None:
    level = 0.01
    lower, upper = clopper_pearson(k, n, level)
    if k > 0:  # P(X ≥ k | p = lower) = level
        assert stats.binom.sf(k - 1, n, lower) == pytest.approx(level, rel=1e-6)
    else:
        assert lower == 0.0
    if k < n:  # P(X ≤ k | p = upper) = level
        assert stats.binom.cdf(k, n, upper) == pytest.approx(level, rel=1e-6)
    else:
        assert upper == 1.0


def _randomized_response(epsilon: float, bit: int, keys: int,
                         rng: np.random.Generator) -> np.ndarray:
    keep = math.exp(epsilon) / (1 + math.exp(epsilon))
    return np.where(rng.random(keys) < keep, bit, 1 - bit).astype(float)


@pytest.mark.statistical
def test_held_out_bound_rarely_exceeds_the_true_loss() -> None:
    """Randomized response at ε = 1 (loss exactly 1): over 500 audits of 100 keys the bound
    exceeds 1 in at most 2 % (its rate is ≤ α = 0.01; 2 % is p < 1e-3 under that rate)."""
    rng = np.random.default_rng(1)  # the simulated mechanism's randomness, not privacy noise
    over = sum(held_out_bound("bit", "pair", _randomized_response(1.0, 0, 100, rng),
                              _randomized_response(1.0, 1, 100, rng), 1).epsilon > 1.0
               for _ in range(500))
    assert over <= 10


@pytest.mark.statistical
def test_held_out_bound_has_power_against_a_large_loss() -> None:
    """Randomized response at ε = 4 is flagged above ε = 1 with 100 keys (at most 2.19 is
    certifiable with one test at α = 0.01)."""
    rng = np.random.default_rng(2)
    bound = held_out_bound("bit", "pair", _randomized_response(4.0, 0, 100, rng),
                           _randomized_response(4.0, 1, 100, rng), 1)
    assert 1.0 < bound.epsilon <= max_certifiable(100, 1) + 1e-12 and bound.event is not None
    assert "ε ≥" in bound.describe()


def test_deterministic_differences_need_a_constant_on_both_sides() -> None:
    on_d = [{"t": 10, "noisy": i, "only_d": 1} for i in range(5)]
    on_n = [{"t": 11, "noisy": i + 1} for i in range(5)]
    found = deterministic_differences(on_d, on_n, "pair")
    assert [(d.field, d.on_d, d.on_neighbour) for d in found] == [
        ("only_d", 1, "<absent>"), ("t", 10, 11)]
    assert deterministic_differences(on_d, on_d, "pair") == []
    mixed = [{"t": 11, "only_d": 1}] * 4 + [{"t": 12, "only_d": 1}]
    assert deterministic_differences(on_d, mixed, "pair") == []  # D′ varies: not (a)
    assert false_alarm_bound(1.0, 20) < 4e-6 < false_alarm_bound(1.0, 10)


def test_flatten_names_every_published_value() -> None:
    fields = flatten({"meta": {"t": 3, "x": float("nan")}, "raw": b"ab",
                      "cells": np.arange(4), "names": ["a", "b"], "nested": [{"k": 1}]},
                     "r", {})
    assert fields["r.meta.t"] == 3 and fields["r.meta.x"] == "nan"
    assert fields["r.raw"][:2] == ("bytes", 2) and fields["r.cells.shape"] == (4,)
    assert fields["r.names"] == ("a", "b") and fields["r.nested[0].k"] == 1


@pytest.mark.parametrize("depth", [1, 2, 4, 7])
def test_cell_mass_counts_the_release_in_the_probe_cell(depth: int) -> None:
    counts = np.random.default_rng(depth).integers(0, 5, 1 << depth)
    release = Release(int(counts.sum()), depth, counts, {"d": 2}, bytes(32))
    record = np.array([0.93, 0.93])
    mass, _ = cell_mass(counts, depth, record, probe_depth=4)
    if depth >= 4:  # exact: the points in the cell are counted
        assert mass == points_mass(release.points, record, probe_depth=4)
    else:  # spread evenly over the probe's share of the leaf
        leaf = counts[-1]
        assert mass == pytest.approx(leaf / (1 << (4 - depth)))


def test_neighbours_change_one_record_at_the_named_step() -> None:
    data = point_input()
    add = neighbours(data, "add_remove")
    assert [n.data.n - data.n for n in add] == [1, 1, -1]
    assert [n.step for n in add] == [1, 12, 1]
    assert [len(s) for s in add[0].data.steps][:2] == [11, 10]
    for pair in neighbours(data, "replace"):
        assert [len(s) for s in pair.data.steps] == [len(s) for s in data.steps]
        assert (pair.data.records != data.records).any(axis=1).sum() == 1
    table = table_input()
    assert not (table.records == neighbours(table, "replace")[0].record).all(axis=1).any()


def test_audit_command_lists_runs_and_writes_the_table(tmp_path) -> None:
    runner = CliRunner()
    listing = runner.invoke(main, ["audit", "--list"])
    assert listing.exit_code == 0
    names = listing.output.split()
    assert {"library:adaptive:add_remove", "cli:run:add_remove", "cli:tabular:add_remove",
            "worker:auto:add_remove", "worker:tabular:replace",
            "library:lowdim:replace"} <= set(names)
    table = tmp_path / "audit.md"
    result = runner.invoke(main, ["audit", "library:pmm:replace", "--keys", "8",
                                  "--markdown", str(table)])
    assert result.exit_code == 0, result.output
    assert "PASS library:pmm:replace" in result.output
    assert "| `library:pmm:replace` | replace | 8 | 0 |" in table.read_text()
    assert runner.invoke(main, ["audit", "nothing:*"]).exit_code == 2
