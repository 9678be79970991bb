"""Tests that catch overspending (issue 13 item 6): every noise a component draws is checked
against what the configured ε allows it, with the allowance computed *here*, from ε and the
documented split (docs/privacy.md P7–P12), never from the code under test.

Two kinds:

- **Draw-scale checks** (deterministic): every discrete Laplace draw of a real run is recorded
  (a spy around ``KeyedNoise.discrete_laplace_at``: the real draw, its scale and address
  noted; ``tests.support.spies.draws``) and the privacy loss those scales imply for one record
  is summed per component and compared with the component's documented share of ε. A
  component that draws less noise than its share (a scale × 0.25, or a budget × 4 the
  accounting does not see) fails. No false alarm. The same for PrivTree's compiled decisions
  (``decisions``: the root's 0-or-1-record decision costs exactly 1/λ, so 1/λ ≤ ε_s).
- **Frequency checks** where the draw happens in compiled code (PrivTree's split decisions) or
  is not Laplace (the exponential mechanism): one decision's empirical privacy loss, a
  Clopper–Pearson lower bound at level 1e-6 per side (false alarm ≤ 2e-6 per case), must not
  exceed the decisions' share; the exponential mechanism's frequencies must fit
  exp(ε·u/(2Δ)) computed here (chi-square, p < 1e-6).

The default mechanism's (guided) are in test_overspend_guided.py. ``python -m benchmarks
mutation`` shows that each overspending mutant fails one of these (or an older test aimed at
its draw): docs/privacy.md P14.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from scipy import stats

from dpsynth.accounting import paper_schedule
from dpsynth.audit.stats import ratio_bound
from dpsynth.clock import TickClock
from dpsynth.noise import KeyedNoise
from dpsynth.offline.lowdim import lowdim_release
from dpsynth.offline.pmm import pmm_leaves
from dpsynth.offline.psmm import psmm_measure
from dpsynth.online.blocks import AdaptiveMechanism
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.selection import exponential_mechanism
from dpsynth.tabular.synthesizer import TabularSynthesizer
from tests.support.spies import after, decisions, draws, expected_form

__all__ = ["decisions", "draws"]  # fixtures

pytestmark = pytest.mark.statistical

KEY = bytes(range(32))
EPSILON = 1.0
#: docs/privacy.md P9: each block's shares of ε (replace: of ε/2 per block, doubled by the
#: group of two). "decisions" and "leaves" are PrivTree's.
SHARES = {
    ("adaptive", "add_remove"): {"size": 0.1, "steps": 0.36, "decisions": 0.27, "leaves": 0.27},
    ("adaptive", "replace"): {"size": 0.0, "steps": 0.2, "decisions": 0.15, "leaves": 0.15},
}
#: docs/privacy.md P9: a step summary spends 30 % of ε_o on decisions, 70 % on leaf counts.
STEP_DECISIONS = 0.3
TOLERANCE = 1 + 1e-9


# -- step blocks (P9, P10) ---------------------------------------------------------------------


def test_documented_shares_are_the_code_shares() -> None:
    """The split this file checks the draws against is the one the accounting uses."""
    for (_schedule, notion), share in SHARES.items():
        b = AdaptiveMechanism.budget_for(EPSILON, notion, "steps")
        assert b.size == pytest.approx(share["size"] * EPSILON)
        assert b.steps == pytest.approx(share["steps"] * EPSILON)
        pmm = share["decisions"] + share["leaves"]
        assert b.structure + b.counts == pytest.approx(pmm * EPSILON)


@pytest.mark.parametrize("epsilon", [0.1, EPSILON, 8.0, 100.0, 1e4])  # both paths (P2c)
@pytest.mark.parametrize("schedule,notion", sorted(SHARES))
def test_P9_block_noise_scales_fit_the_documented_shares(draws, schedule, notion,
                                                         epsilon) -> None:
    """Leaf counts of blocks (Lap_Z(1/ε_c)), step summaries (Lap_Z(1/(0.7 ε_o))) and open-block
    sizes (Binary Mechanism, a step in b + 1 nodes): each component's loss for one record, from
    the scales drawn, within its share — at ε from 0.1 to 10⁴, so on both paths of the leaf
    noise (dense, and sparse from ε_c ≈ 1.95: P2c), each leaf kind seen on the path the public
    rule gives at its share (benchmarks/draws.py)."""
    share = SHARES[(schedule, notion)]
    synth = OnlineSynthesizer(2, epsilon, KEY, 20, schedule, 8, neighbours=notion)
    points = np.random.default_rng(5).random((15 * 40, 2))  # public test data
    for step in range(15):  # blocks 0-3 close (steps 1, 3, 7, 15); step summaries between
        synth.add(points[step * 40:(step + 1) * 40])
        synth.step()
    loss: dict[tuple, float] = defaultdict(float)
    forms: dict[str, set[str]] = defaultdict(set)
    for (scale, context, _), form in zip(draws, draws.forms, strict=True):
        if "leaf" in context and "block" in context:
            loss["leaves", after(context, "block")] += 1 / scale  # one leaf per record
            forms["leaves"].add(form)
        elif "leaf" in context and "step" in context:
            loss["steps", after(context, "step")] += 1 / scale
            forms["steps"].add(form)
        elif "size" in context:  # heights b + 1: one node per height holds the step
            b = int(after(context, "size"))
            loss["size", b] = max(loss["size", b], (b + 1) / scale)
    per_block: dict[tuple, float] = defaultdict(float)
    for key, value in loss.items():
        per_block[key[:2]] += value
    kinds = {k[0] for k in per_block}
    assert {"leaves", "steps"} <= kinds and ("size" in kinds) == (notion == "add_remove")
    allowed = {"size": share["size"], "steps": share["steps"] * (1 - STEP_DECISIONS),
               "leaves": share["leaves"]}
    for (kind, _), value in per_block.items():
        assert value <= allowed[kind] * epsilon * TOLERANCE, (kind, value, allowed[kind])
    for kind in ("leaves", "steps"):  # the leaf noise's own ε is its share: 1/scale
        assert forms[kind] == {expected_form(allowed[kind] * epsilon)}, (kind, forms)


def _leaf_frequency(schedule: str, notion: str, epsilon: float, records: int, step: int,
                    runs: int) -> int:
    """Runs (one key each) in which the root of step ``step``'s PrivTree stayed a leaf, with
    ``records`` records in that step and none before (max_depth 1: the root alone decides)."""
    leaves = 0
    point = np.full((records, 2), 0.3)
    for run in range(runs):
        synth = OnlineSynthesizer(2, epsilon, (10**6 * step + run).to_bytes(32, "big"), 10,
                                  schedule, 1, neighbours=notion)
        for s in range(1, step + 1):
            if s == step:
                synth.add(point)
            synth.step()
        engine = synth._mechanism
        tree = engine.blocks[-1] if step == 1 else engine.step_summaries[-1]
        leaves += int(tree.depths.max() == 0)
    return leaves


@pytest.mark.parametrize("notion", ["add_remove", "replace"])
@pytest.mark.parametrize("which", ["block", "step_summary"])
def test_P10_one_split_decision_costs_at_most_the_decision_share(which, notion) -> None:
    """The root's decision with 0 or 1 record (max_depth 1, so it is the whole tree): the
    empirical loss ln P(leaf | 0)/P(leaf | 1) must stay within the decisions' share ε_s —
    a lower confidence bound (Clopper–Pearson, 1e-6 per side, 4000 keys per input) above ε_s
    fails. The bound is tight for max_depth 1 (λ is the smallest with loss ≤ ε_s); a 4×
    smaller scale gives 4ε_s, far above."""
    epsilon = 2.0
    share = SHARES[("adaptive", notion)]
    if which == "block":
        step, allowed = 1, share["decisions"] * epsilon  # block 0 is step 1
    else:
        step, allowed = 2, share["steps"] * STEP_DECISIONS * epsilon  # step 2 of block 1
    runs = 4000
    empty = _leaf_frequency("adaptive", notion, epsilon, 0, step, runs)
    one = _leaf_frequency("adaptive", notion, epsilon, 1, step, runs)
    assert 0 < one < empty < runs  # both outcomes seen
    assert ratio_bound(empty, one, runs, 1e-6) <= allowed, (empty, one, allowed)


@pytest.mark.parametrize("epsilon", [0.1, EPSILON, 8.0, 100.0, 1e4])  # both descents (P10)
@pytest.mark.parametrize("notion", ["add_remove", "replace"])
def test_P10_decision_noise_of_every_tree_fits_its_share(decisions, notion, epsilon) -> None:
    """Every PrivTree of a real adaptive run (block and step summaries, any depth): its root
    decides between 0 and 1 record with loss exactly 1/λ (the leaf probabilities' ratio
    p^−GRID, P10), so 1/λ ≤ ε_s is necessary for the whole tree to cost ε_s — ε_s from the
    documented shares, computed here. At ε from 0.1 to 10⁴, so through both descents: each
    tree is drawn by the rare-outcome descent exactly where λ ≤ 1 record (P10). Deterministic
    (no false alarm); a 4× smaller λ gives about 1.7 ε_s."""
    share = SHARES[("adaptive", notion)]
    synth = OnlineSynthesizer(2, epsilon, KEY, 20, "adaptive", 8, neighbours=notion)
    points = np.random.default_rng(5).random((8 * 40, 2))  # public test data
    for step in range(8):  # blocks 0-2 close (steps 1, 3, 7); step summaries between
        synth.add(points[step * 40:(step + 1) * 40])
        synth.step()
    kinds = set()
    for (lam, context), form in zip(decisions, decisions.forms, strict=True):
        kind = "block" if "block" in context else "step"
        kinds.add(kind)
        allowed = share["decisions"] if kind == "block" else share["steps"] * STEP_DECISIONS
        assert 1 / lam <= allowed * epsilon * TOLERANCE, (context, 1 / lam, allowed)
        assert form == ("descent: rare" if lam <= 1 else "descent: dense"), (context, lam)
    assert kinds == {"block", "step"}


@pytest.mark.parametrize("epsilon", [0.1, EPSILON, 10.0])  # paper runs up to ε = 10
def test_P5_paper_level_counters_spend_their_scheduled_epsilon(draws, epsilon) -> None:
    """HVZ Alg 1 (``paper``): per cell depth j and time level r, the level counters' threshold
    noise (1/scale, the sparse vector's share: P3), Binary Mechanism (a segment in L nodes)
    and end-of-level count (1/scale) together within ε_{j,r} of the schedule the accounting
    checked (P1, P5): the budget handed to the counters is the one accounted. At the smallest,
    the default and the largest ε it runs at. Deterministic: no false alarm."""
    d, every = 2, 40  # at ε = 0.1 a segment closes (its Binary Mechanism draws) under KEY
    synth = OnlineSynthesizer(d, epsilon, KEY, every, "paper", 6)
    synth.extend(np.random.default_rng(4).random((3000, d)))
    schedule = paper_schedule(d, epsilon)
    clock = TickClock(epsilon=epsilon, release_every=every)
    spent: dict[tuple[int, int], dict[str, float]] = defaultdict(dict)
    for scale, context, _ in draws:
        j, r, kind = int(after(context, "cells")), int(after(context, "level")), context[-1]
        levels = int(clock.ticks_in_level(r)).bit_length() if kind == "bm" else 1
        spent[j, r][kind] = max(spent[j, r].get(kind, 0.0), levels / scale)
    assert {kind for parts in spent.values() for kind in parts} == {"thr", "bm", "end"}
    for (j, r), parts in spent.items():
        allowed = schedule.level_epsilon(j, r)
        assert sum(parts.values()) <= allowed * TOLERANCE, (j, r, parts, allowed)


# -- offline PMM (P7) --------------------------------------------------------------------------


#: The offline and tabular draws have one path each: they are checked at the smallest, the
#: default and the largest ε (benchmarks/draws.py).
EXTREMES = [0.1, EPSILON, 1e4]


@pytest.mark.parametrize("epsilon", EXTREMES)
@pytest.mark.parametrize("notion,hint", [("add_remove", None), ("add_remove", 300),
                                         ("replace", None)])
def test_P7_pmm_draws_spend_at_most_epsilon(draws, notion, hint, epsilon) -> None:
    """One record changes one cell per level (two under replacement): Σ_j c/σ_j plus the noisy
    size (add/remove without a public hint) within ε."""
    points = np.random.default_rng(7).random((300, 2))
    pmm_leaves(points, epsilon, KEY, neighbours=notion, size_hint=hint)
    cells_changed = 2 if notion == "replace" else 1
    levels = {ctx: 1 / scale for scale, ctx, _ in draws if "level" in ctx}
    size = sum(1 / scale for scale, ctx, _ in draws if ctx[-1] == "size")
    assert levels and (size > 0) == (notion == "add_remove" and hint is None)
    assert cells_changed * sum(levels.values()) + size <= epsilon * TOLERANCE


@pytest.mark.parametrize("epsilon", EXTREMES)
@pytest.mark.parametrize("notion", ["add_remove", "replace"])
def test_P7b_psmm_draws_spend_at_most_epsilon(draws, notion, epsilon) -> None:
    """PSMM: one record changes one cell by one (two cells under replacement): c/σ plus the
    noisy size (add/remove) within ε. Deterministic: no false alarm."""
    points = np.random.default_rng(7).random((300, 2))
    psmm_measure(points, epsilon, KEY, neighbours=notion)
    cells = [1 / scale for scale, ctx, _ in draws if "cell" in ctx]
    size = sum(1 / scale for scale, ctx, _ in draws if ctx[-1] == "size")
    assert cells and (size > 0) == (notion == "add_remove")
    changed = 2 if notion == "replace" else 1
    assert changed * max(cells) + size <= epsilon * TOLERANCE


#: docs/privacy.md P7b: a real query is released as g·(⌊q/g⌋ + Z) + g/2, g = Δ/1024, so ⌊q/g⌋
#: is an integer query of sensitivity at most 1025.
GRID_SENSITIVITY = 1025


@pytest.mark.parametrize("epsilon", EXTREMES)
def test_P7b_lowdim_draws_spend_at_most_epsilon(draws, epsilon) -> None:
    """lowdim (Alg 5, replacement): the covariance and the mean each within ε/3 — every
    released entry an integer query of sensitivity 1025 (P7b), loss Σ 1025/s — and the
    synthesis on the projected points (PMM or PSMM under replacement: two cells per level, or
    two cells) within ε/3. Deterministic: no false alarm."""
    points = np.random.default_rng(8).random((600, 3))
    lowdim_release(points, epsilon, KEY, 2, neighbours="replace")
    spent: dict[str, float] = defaultdict(float)
    for scale, context, n in draws:
        part = context[1]  # ("lowdim", "cov" | "mean" | "pmm" | "psmm", ...)
        if part in ("cov", "mean"):
            spent[part] += n * GRID_SENSITIVITY / scale
        elif "level" in context:  # PMM: the moved record changes two cells of each level
            spent[part] += 2 / scale
        else:  # PSMM: two cells
            spent[part] = max(spent[part], 2 / scale)
    assert {"cov", "mean"} <= set(spent) and len(spent) == 3, spent
    assert all(v <= epsilon / 3 * TOLERANCE for v in spent.values()), spent


# -- tabular (P12) -----------------------------------------------------------------------------


DOMAIN = Domain.from_dict({"version": 1, "attributes": [
    {"name": "a", "size": 3}, {"name": "b", "size": 3}, {"name": "c", "size": 2}]})


@pytest.mark.parametrize("epsilon", EXTREMES)
@pytest.mark.parametrize("notion", ["add_remove", "replace"])
@pytest.mark.parametrize("mechanism,selection", [("proposed", "cyclic"), ("proposed", "em"),
                                                 ("baseline", "em")])
def test_P12_tabular_measurements_and_size_fit_the_split(draws, monkeypatch, mechanism,
                                                         selection, notion, epsilon) -> None:
    """ε_n = 0.1ε for the size (add/remove); with the EM, (ε − ε_n)/(2k) per selection and per
    measurement; with the public cyclic schedule (issue 17) no selection draws anything and
    each measurement gets (ε − ε_n)/k; every sensitivity doubled under replacement
    (docs/privacy.md P12): the counters, the StreamingMWEM measurements, the size counter and
    the selections' (ε, Δ) fit it."""
    selections: list[tuple[float, float]] = []
    real_em = exponential_mechanism

    def em_spy(scores, epsilon, sensitivity, *args):  # type: ignore[no-untyped-def]
        selections.append((epsilon, sensitivity))
        return real_em(scores, epsilon, sensitivity, *args)

    monkeypatch.setattr("dpsynth.tabular.synthesizer.exponential_mechanism", em_spy)
    k, s = 3, (2.0 if notion == "replace" else 1.0)
    size_eps = 0.1 * epsilon if notion == "add_remove" else 0.0
    public = mechanism == "proposed" and selection == "cyclic"
    per_query = (epsilon - size_eps) / (2 * k)
    per_measure = (epsilon - size_eps) / k if public else per_query
    synth = TabularSynthesizer(DOMAIN, epsilon, KEY, release_every=20, mechanism=mechanism,
                               workloads_per_step=k, neighbours=notion, selection=selection)
    codes = np.random.default_rng(8).integers(0, 2, (100, 3))
    for step in range(5):
        synth.add(codes[step * 20:(step + 1) * 20])
        synth.step()
    kinds = set()
    for scale, context, _ in draws:
        if "size" in context:  # the unbounded Block counter: an input in two noisy sums
            kinds.add("size")
            assert 2 / scale <= size_eps * TOLERANCE
        elif "ctr" in context or "measure" in context:  # simple counter, or one measurement
            kinds.add("measure")
            assert s / scale <= per_measure * TOLERANCE
    assert "measure" in kinds and ("size" in kinds) == (notion == "add_remove")
    if public:  # the cyclic schedule reads no data and draws nothing
        assert not selections
        return
    smallest = min(int(np.prod(pair)) for pair in [(3, 3), (3, 2), (3, 2)])
    assert selections and all(e <= per_query * TOLERANCE and delta >= s / smallest / TOLERANCE
                              for e, delta in selections)


def test_em_frequencies_fit_exp_eps_u_over_two_delta_computed_here() -> None:
    """40000 draws (distinct addresses) against P(i) ∝ exp(ε u_i/(2Δ)) computed in this test;
    chi-square rejects at p < 1e-6. A 4× larger ε is rejected (power)."""
    noise = KeyedNoise(bytes(range(32)))
    scores, epsilon, delta, n = np.array([0.0, 0.5, 1.0, 2.0, 1.5]), 1.0, 0.25, 40_000
    counts = np.bincount([exponential_mechanism(scores, epsilon, delta, noise, ("em-x",), 0, e)
                          for e in range(n)], minlength=scores.size)

    def expected(eps: float) -> np.ndarray:
        weights = np.array([math.exp(eps * u / (2 * delta)) for u in scores])
        return n * weights / weights.sum()

    assert stats.chisquare(counts, expected(epsilon)).pvalue > 1e-6
    assert stats.chisquare(counts, expected(4 * epsilon)).pvalue < 1e-6
