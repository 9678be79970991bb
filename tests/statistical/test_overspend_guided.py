"""Overspending tests of the default mechanism, guided (issue 25; docs/privacy.md P16).

As tests/statistical/test_overspend.py: the allowance of each draw is computed *here*, from ε
and the documented split, never from the code under test. Draw-scale checks (deterministic, no
false alarm): every Lap_Z draw of a real run (spy ``draws``) and every PrivTree of the paid
refinement (spy ``decisions``: a root decision between 0 and 1 record costs exactly 1/λ, so
1/λ ≤ ε_s is necessary) within its share. One frequency check of the noise *released* in the
histograms (one-sided exact binomial, false alarm ≤ 1e-6 per kind). ``python -m benchmarks
mutation`` shows that every guided mutant — each scale × ¼, each share × 4 — fails one of them.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from scipy import stats

from dpsynth.online.guided import GuidedMechanism, refinement
from dpsynth.online.privtree import NONZERO_SHARE
from dpsynth.online.summary import Summary
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.tree import route
from tests.support.spies import after, decisions, draws, expected_form

__all__ = ["decisions", "draws"]  # fixtures

pytestmark = pytest.mark.statistical

KEY = bytes(range(32))
EPSILON = 1.0
#: docs/privacy.md P16: guided's shares of ε per block — the open-block size ε_n (add/remove),
#: the time nodes ε_o (split equally over the block's levels), the block's own histogram ε_top
#: (block 0, without nodes: ε_top + ε_o); under replacement each block runs at ε/2 and a
#: changed record is a removal and an addition in the same histograms (a group of two).
GUIDED_SHARES = {"add_remove": {"size": 0.1, "nodes": 0.54, "top": 0.36, "changes": 1},
                 "replace": {"size": 0.0, "nodes": 0.3, "top": 0.2, "changes": 2}}
#: docs/privacy.md P16: a summary whose own ε is at least 32 spends half of it on a PrivTree.
REFINE_FROM, REFINE_SHARE = 32.0, 0.5
TOLERANCE = 1 + 1e-9


def test_documented_guided_shares_are_the_code_shares() -> None:
    """The split this file checks the draws against is the one the accounting uses."""
    for notion, share in GUIDED_SHARES.items():
        b = GuidedMechanism.budget_for(EPSILON, notion)
        assert (b.size, b.steps, b.counts, b.structure) == pytest.approx(
            (share["size"] * EPSILON, share["nodes"] * EPSILON, share["top"] * EPSILON, 0.0))
        assert b.worst_case_loss == pytest.approx(EPSILON)


def _node_levels(b: int) -> int:
    """Time levels of guided's block b, computed here: l ≥ 0 with 8^l < 2^b (block 0: none)."""
    return sum(1 for level in range(b + 1) if 8 ** level < 2 ** b) if b else 0


def _guided_allowed(notion: str, epsilon: float) -> dict[tuple, float]:
    """The ε of each guided summary of blocks 0-4 (docs/privacy.md P16, computed here):
    ("block", b) and ("node", b, l); block 0 holds the node share too."""
    share = GUIDED_SHARES[notion]
    out: dict[tuple, float] = {}
    for b in range(5):
        levels = _node_levels(b)
        out["block", b] = (share["top"] + (0 if levels else share["nodes"])) * epsilon
        for level in range(levels):
            out["node", b, level] = share["nodes"] / levels * epsilon
    return out


def _guided_run(notion: str, epsilon: float, steps: int, per_step: int, key: bytes = KEY,
                seed: int = 5) -> tuple[OnlineSynthesizer, list[np.ndarray]]:
    synth = OnlineSynthesizer(2, epsilon, key, per_step, "guided", 8, neighbours=notion)
    points = np.random.default_rng(seed).random((steps * per_step, 2))  # public test data
    batches = [points[s * per_step:(s + 1) * per_step] for s in range(steps)]
    for batch in batches:
        synth.add(batch)
        synth.step()
    return synth, batches


def _summary_of(context: tuple) -> tuple:
    """("block", b) or ("node", b, level) of a guided noise address."""
    if "node" in context:
        return "node", after(context, "node"), context[context.index("node") + 2]
    return "block", after(context, "block")


def _size_loss(draws, notion: str, epsilon: float) -> dict[int, float]:  # type: ignore[no-untyped-def]
    """The open-block size counter's loss per block b (a step lies in one node of each of its
    b + 1 heights), each checked within ε_n = the documented size share (add/remove only)."""
    loss: dict[int, float] = defaultdict(float)
    for scale, context, _ in draws:
        if "size" in context:
            b = int(after(context, "size"))
            loss[b] = max(loss[b], (b + 1) / scale)
    assert bool(loss) == (notion == "add_remove"), loss
    limit = GUIDED_SHARES[notion]["size"] * epsilon
    assert all(value <= limit * TOLERANCE for value in loss.values()), (loss, limit)
    return loss


@pytest.mark.parametrize("epsilon", [0.1, EPSILON, 8.0])  # below REFINE_FROM: both leaf paths
@pytest.mark.parametrize("notion", ["add_remove", "replace"])
def test_P16_guided_noise_scales_fit_the_documented_shares(draws, notion, epsilon) -> None:
    """The default mechanism over 24 steps (blocks 0-3 closed, block 4 open with level-0 and
    level-1 time nodes) at ε from 0.1 to 8 (every summary below REFINE_FROM): one record's loss
    per block, from every scale drawn — the size counter's b + 1 heights, one leaf of its
    block's histogram, one leaf of one node per level — each within its documented share and
    all within ε (group of two under replacement); each histogram's leaf noise drawn on the
    path the public rule gives at its ε (dense, or sparse where P(Lap_Z ≠ 0) ≤ ¼: P2c).
    Deterministic: no false alarm; a scale × ¼ or a share × 4 exceeds it."""
    share, allowed = GUIDED_SHARES[notion], _guided_allowed(notion, epsilon)
    _guided_run(notion, epsilon, 24, 40)
    loss: dict[tuple, float] = defaultdict(float)
    for key, value in _size_loss(draws, notion, epsilon).items():
        loss["size", key] = value
    for (scale, context, _), form in zip(draws, draws.forms, strict=True):
        assert "guided" in context and "split" not in context  # below REFINE_FROM
        if "size" not in context:  # one leaf per histogram; of a level's nodes, in one
            key = _summary_of(context)
            loss[key] = max(loss[key], share["changes"] / scale)
            assert form == expected_form(allowed[key]), (key, form, allowed[key])
    assert {k[0] for k in loss} == ({"size", "block", "node"} if notion == "add_remove"
                                    else {"block", "node"})
    assert ("node", 4, 1) in loss and ("block", 3) in loss  # every kind of summary was drawn
    per_block: dict[int, float] = defaultdict(float)
    for key, value in loss.items():
        limit = share["size"] * epsilon if key[0] == "size" else share["changes"] * allowed[key]
        assert value <= limit * TOLERANCE, (key, value, limit)
        per_block[int(key[1])] += value
    assert all(v <= epsilon * TOLERANCE for v in per_block.values()), per_block


@pytest.mark.parametrize("notion,epsilon", [("add_remove", 100.0), ("replace", 200.0),
                                            ("add_remove", 1e4), ("replace", 1e4)])
def test_P16_refined_summaries_spend_their_epsilon_on_decisions_and_counts(
        draws, decisions, notion, epsilon) -> None:
    """At a per-record ε where every summary's own ε_h is at least REFINE_FROM, up to 10⁴, each
    summary draws a PrivTree at its "split" address (rare-outcome descent: λ ≤ 1 record) and
    then its leaf counts (sparse form): the tree's root decision costs 1/λ (necessary for the
    tree's ε_s, P10) ≤ ε_s = ½ ε_h, the counts 1/scale ≤ ε_h − ε_s, the open-block sizes within
    ε_n (documented shares, computed here). Deterministic: no false alarm."""
    assert refinement.REFINE_FROM == REFINE_FROM and refinement.REFINE_SHARE == REFINE_SHARE
    allowed = _guided_allowed(notion, epsilon)
    _guided_run(notion, epsilon, 8, 30)  # blocks 0-2 and their 7 nodes, block 3 with 1 node
    trees = {context[:-1]: 1 / lam for lam, context in decisions}  # per summary: its address
    assert set(decisions.forms) == {"descent: rare"}
    _size_loss(draws, notion, epsilon)
    counts: dict[tuple, float] = defaultdict(float)
    for (scale, context, _), form in zip(draws, draws.forms, strict=True):
        if context[-1] == "leaf":
            counts[context[:-1]] = max(counts[context[:-1]], 1 / scale)
            assert form == "sparse", (context, form)
    assert set(counts) == set(trees) and len(trees) == 10  # every summary was refined
    for summary, decision in trees.items():
        epsilon_h = allowed[_summary_of(summary)]
        assert epsilon_h >= REFINE_FROM  # the configuration refines every summary
        structure = REFINE_SHARE * epsilon_h
        assert decision <= structure * TOLERANCE, (summary, decision, structure)
        assert counts[summary] <= (epsilon_h - structure) * TOLERANCE, summary


def _zeros_bound(n: int, p0: float, alpha: float = 1e-6) -> int:
    """The smallest z with P(Binomial(n, p0) ≥ z) ≤ alpha."""
    return int(stats.binom.isf(alpha, n, p0)) + 1


def test_P16_guided_leaf_noise_is_as_frequent_as_its_scale() -> None:
    """The noise *released* in guided's histograms — each leaf's noisy count minus the true
    count of its records — at the documented scale σ = 1/ε_h: Lap_Z(σ) is 0 with probability
    (1 − p)/(1 + p), p = e^−1/σ. Over the block histograms (b = 1-3, ε_top) and the level-0
    nodes of blocks 1-3 (ε_o) of 6 keys, too many exact zeros (too little noise) fails:
    one-sided exact binomial, false alarm ≤ 1e-6 per kind. At ¼ of the scale zeros are 3-4×
    as frequent."""
    share = GUIDED_SHARES["add_remove"]
    noise = _guided_leaf_noise(EPSILON)
    for kind, epsilon in (("block", share["top"]), ("node", share["nodes"])):
        z = noise[kind]
        p = math.exp(-epsilon)  # e^{−1/σ}, σ = 1/ε_h
        p_zero = (1 - p) / (1 + p)
        assert z.size >= 150, (kind, z.size)
        assert int((z == 0).sum()) < _zeros_bound(z.size, p_zero), (kind, (z == 0).mean())


@pytest.mark.parametrize("epsilon", [8.0])
def test_P16_sparse_leaf_noise_is_as_frequent_as_its_scale(epsilon) -> None:
    """At ε = 8 every leaf count is noised by the sparse sampler (P2c: P(Lap_Z ≠ 0) ≤ ¼ at
    ε_h = 2.88 and 4.32): the released noise of the block histograms (b = 1-3) and level-0 nodes
    of 6 keys is nonzero with probability π = 2p/(1 + p), p = e^−ε_h; too few nonzero leaves
    (too little noise) fails: one-sided exact binomial, false alarm ≤ 1e-6 per kind. At ¼ of
    the scale π falls 10⁴-fold."""
    share = GUIDED_SHARES["add_remove"]
    noise = _guided_leaf_noise(epsilon)
    for kind, eps_h in (("block", share["top"] * epsilon), ("node", share["nodes"] * epsilon)):
        assert eps_h < REFINE_FROM  # no refinement: the leaves are the guided partition's
        z = noise[kind]
        p = math.exp(-eps_h)
        pi = 2 * p / (1 + p)
        assert pi <= NONZERO_SHARE  # the sparse sampler draws these
        assert z.size * pi >= 20, (kind, z.size)
        nonzero = int((z != 0).sum())
        assert stats.binom.cdf(nonzero, z.size, pi) > 1e-6, (kind, nonzero, z.size, pi)


def _guided_leaf_noise(epsilon: float) -> dict[str, np.ndarray]:
    """The released leaf noise of guided (add/remove, d = 2, 8 levels, steps of 40 public test
    points) over 6 keys: of the block histograms b = 1-3 (ε_top) and of the level-0 nodes of
    blocks 1-3 (ε_o), each kind concatenated."""
    noise: dict[str, list[np.ndarray]] = {"block": [], "node": []}
    for k in range(6):
        synth = OnlineSynthesizer(2, epsilon, bytes([k]) * 32, 40, "guided", 8,
                                  neighbours="add_remove")
        points = np.random.default_rng(9).random((15 * 40, 2))  # public test data
        for step in range(1, 16):  # blocks 0-3 close at steps 1, 3, 7, 15
            batch = points[(step - 1) * 40:step * 40]
            synth.add(batch)
            synth.step()
            b, mech = step.bit_length() - 1, synth._mechanism
            node = mech.nodes.get((0, step - (1 << b)))  # gone at its block's last step
            if b >= 1 and node is not None:
                noise["node"].append(_leaf_noise(node, batch))
        for b in (1, 2, 3):
            block = points[((1 << b) - 1) * 40:((2 << b) - 1) * 40]
            noise["block"].append(_leaf_noise(mech.blocks[b], block))
    return {kind: np.concatenate(arrays) for kind, arrays in noise.items()}


def _leaf_noise(summary: Summary, points: np.ndarray) -> np.ndarray:
    """A summary's noisy leaf counts minus the true counts of ``points`` in its leaves."""
    cells = route(points, depth=8)
    depths = summary.depths.astype(np.uint64)
    starts = summary.prefixes << (np.uint64(8) - depths)
    ends = (summary.prefixes + np.uint64(1)) << (np.uint64(8) - depths)
    true = ((cells[None, :] >= starts[:, None]) & (cells[None, :] < ends[:, None])).sum(axis=1)
    assert true.sum() == len(points)  # the leaves partition the cube
    return summary.counts - true
