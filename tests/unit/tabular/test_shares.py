"""Issue 17: the cyclic schedule, counter shares and their replay fit, and their accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsynth.accounting import StepLedger, check_select_measure_budget, select_measure_split
from dpsynth.errors import BudgetExceededError, ConfigError, StateCorruptError
from dpsynth.noise import KeyedNoise
from dpsynth.state import pack_state, unpack_state
from dpsynth.tabular import Domain, TabularSynthesizer
from dpsynth.tabular.counters import Counter
from dpsynth.tabular.model import ParticleModel
from dpsynth.tabular.selection import cyclic_order
from dpsynth.tabular.shares import counter_shares, fit_shares
from dpsynth.tabular.workloads import Workloads
from tests.support.tabular import feed_steps

KEY = bytes(range(32))
DOM = Domain.from_dict({"a": 2, "b": 3, "c": 2, "d": 4, "e": 3})  # 10 workloads


def _data(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)  # public test data, not privacy noise
    a = rng.integers(0, 2, n)
    b = (a + rng.integers(0, 2, n)) % 3
    return np.stack([a, b, rng.integers(0, 2, n), (2 * a + b) % 4, rng.integers(0, 3, n)], 1)


@pytest.mark.parametrize("k", [1, 3, 4, 10])
def test_cyclic_schedule_cannot_starve_a_workload(k):
    """k distinct workloads per step; every window of ⌈W/k⌉ consecutive steps measures every
    workload (so every attribute); the order is a function of the key only (public)."""
    synth = TabularSynthesizer(DOM, 1.0, KEY, release_every=5, workloads_per_step=k)
    n_workloads = len(synth.workloads)
    window = math.ceil(n_workloads / k)
    picks = []
    for _ in range(3 * window):
        synth.add(_data(5))
        synth.step()
        assert len(set(synth.last_selected)) == k
        picks.append(synth.last_selected)
    for start in range(len(picks) - window + 1):
        assert {j for step in picks[start:start + window] for j in step} == set(
            range(n_workloads))
    again = TabularSynthesizer(DOM, 1.0, KEY, release_every=5, workloads_per_step=k)
    assert np.array_equal(again.schedule, synth.schedule)
    data_free = cyclic_order(KeyedNoise(KEY), ("tabular", 0, "cyclic"), n_workloads)
    assert np.array_equal(data_free, synth.schedule)  # no data enters the schedule
    other = cyclic_order(KeyedNoise(bytes(32)), ("tabular", 0, "cyclic"), n_workloads)
    assert sorted(other.tolist()) == list(range(n_workloads))


def test_cyclic_split_and_ledger():
    """Cyclic selection spends nothing; the k counters share ε − ε_n; a step spends exactly ε,
    checked at construction and on the ledger; one measurement more is refused."""
    assert select_measure_split(2.0, 4, 0.2, selection_share=0.0) == (0.0, pytest.approx(0.45))
    with pytest.raises(ConfigError, match="selection_share"):
        select_measure_split(1.0, 2, selection_share=1.0)
    assert check_select_measure_budget(1.0, 3, 0.0, 0.3, 0.1) == pytest.approx(1.0)
    with pytest.raises(BudgetExceededError):
        check_select_measure_budget(1.0, 3, 0.0, 0.31, 0.1)  # k·ε_meas above ε − ε_n
    with pytest.raises(ConfigError, match="measurement_epsilon"):
        check_select_measure_budget(1.0, 3, 0.3, 0.0)
    synth = TabularSynthesizer(DOM, 2.0, KEY, release_every=50, workloads_per_step=3)
    assert (synth.eps_size, synth.eps_select) == (pytest.approx(0.2), 0.0)
    assert synth.eps_measure == pytest.approx(0.6)
    assert all(c.epsilon == pytest.approx(0.6) for c in synth.counters)
    feed_steps(synth, _data(150))
    assert synth.ledger.max_spent == pytest.approx(2.0)
    ledger = StepLedger(2.0)
    ledger.charge("size", 0.2)
    for _ in range(3):
        ledger.charge("measure", synth.eps_measure)
    with pytest.raises(BudgetExceededError):
        ledger.charge("measure", synth.eps_measure)


def test_fit_shares_recovers_consistent_shares_and_keeps_the_mass():
    """Exact (noise-free) counters of a dataset: the replay fit from a uniform start reproduces
    every workload's proportions on a full-domain support; the mass is the given total."""
    workloads = Workloads(DOM.sizes)
    model = ParticleModel.initial(workloads, KeyedNoise(KEY), ("t",), support_size=10,
                                  full_domain_limit=1 << 16)
    data = _data(2000, seed=4)
    counters = []
    for i, table in enumerate(workloads.answers(data)):
        counter = Counter("simple", int(workloads.cells[i]), 1e9, KeyedNoise(KEY), ("x", i))
        counter.feed(table.astype(np.int64))
        counters.append(counter)
    start = np.full(model.weights.size, 1.0)
    fitted = fit_shares(model, start, counters, 500.0, passes=60, damping=1.0)
    assert fitted.sum() == pytest.approx(500.0)
    for got, want in zip(model.answers(fitted), workloads.answers(data), strict=True):
        assert np.abs(got / 500 - want / 2000).max() < 0.01
    assert np.array_equal(fit_shares(model, start, [Counter("simple", int(c), 1.0,
                          KeyedNoise(KEY), ("y",)) for c in workloads.cells], 500.0, passes=2,
                          damping=0.5), start)  # nothing fed: unchanged


def test_counter_shares_weigh_by_noise():
    """ρ = S²/(S + V·|q|): the same counts with more noise (smaller ε) weigh less; an unfed or
    all-negative counter has weight 0 and is skipped."""
    x = np.array([30, 10, 5, 5], np.int64)
    rhos = []
    for eps in (8.0, 0.5):
        counter = Counter("simple", 4, eps, KeyedNoise(KEY), ("w",))
        for _ in range(5):
            counter.feed(x)
        rhos.append(counter_shares([counter])[1][0])
    assert 0 < rhos[1] < rhos[0] < 260  # at most the noisy total, ≈ 250
    empty = Counter("simple", 4, 1.0, KeyedNoise(KEY), ("e",))
    assert counter_shares([empty])[2].tolist() == [False]


def test_bad_new_options():
    for bad in (0.0, 1.5, True):
        with pytest.raises(ConfigError, match="damping"):
            TabularSynthesizer(DOM, 1.0, KEY, release_every=5, damping=bad)
    with pytest.raises(ConfigError, match="selection"):
        TabularSynthesizer(DOM, 1.0, KEY, release_every=5, selection="greedy")
    with pytest.raises(ConfigError, match="estimator='alg3'"):
        TabularSynthesizer(DOM, 1.0, KEY, release_every=5, fit="pgm")


def test_snapshot_from_before_issue_17_restores_the_em_selection():
    """A snapshot without ``selection`` (before issue 17) ran the EM: it continues so; its old
    ``estimator="sample"`` (rescaled by the private fed count) is refused."""
    synth = TabularSynthesizer(DOM, 1.0, KEY, release_every=5, selection="em",
                               estimator="alg3", neighbours="replace")
    feed_steps(synth, _data(20))
    state = unpack_state(synth.snapshot())
    for name in ("selection", "damping"):
        del state["config"][name]
    restored = TabularSynthesizer.restore(pack_state(state), KEY)
    assert (restored.selection, restored.estimator) == ("em", "alg3")
    state["config"]["estimator"] = "sample"
    with pytest.raises(StateCorruptError, match="start a new run"):
        TabularSynthesizer.restore(pack_state(state), KEY)


def test_guided_rejuvenation_finds_a_deterministic_pair():
    """A guide in which b = a // 2 exactly (as age_10 = age // 10 on Adult). One move per point:
    1/6 of the points move b given a and 1/6 move a given b, and those land on the rule, so
    ≈ 0.2 + 0.8/3 ≈ 0.47 of the points satisfy it after one guided rejuvenation (0.469 with
    this key) against the uniform start's 0.2, which 1-way moves keep; the mass is kept."""
    dom = Domain.from_dict({"a": 10, "b": 5, "c": 3})
    workloads = Workloads(dom.sizes)
    model = ParticleModel.initial(workloads, KeyedNoise(KEY), ("g",), support_size=3000,
                                  full_domain_limit=10)
    model.weights = np.full(3000, 2.0)
    rule = np.zeros((10, 5))
    rule[np.arange(10), np.arange(10) // 2] = 1.0
    guides = [rule.ravel(), np.ones(30), np.ones(15)]  # pairs (a,b), (a,c), (b,c)
    before = model.support.copy()
    model.rejuvenate(KeyedNoise(KEY), ("r",), passes=2, guides=guides)
    after = model.support
    assert model.total == pytest.approx(6000.0)
    holds = after[:, 1] == after[:, 0] // 2
    assert holds.mean() > 0.4 and (before[:, 1] == before[:, 0] // 2).mean() < 0.25
    plain = ParticleModel.initial(workloads, KeyedNoise(KEY), ("g",), support_size=3000,
                                  full_domain_limit=10)
    plain.weights = np.full(3000, 2.0)
    plain.rejuvenate(KeyedNoise(KEY), ("r",), passes=2)
    assert (plain.support[:, 1] == plain.support[:, 0] // 2).mean() < 0.25


def test_default_k_is_the_measured_rule():
    """No k given: k = max(1, round(2ε)), capped at the workloads (docs/tabular.md T3)."""
    dom = Domain.from_dict({"a": 2, "b": 3, "c": 2})  # 3 workloads
    for epsilon, k in ((0.5, 1), (1.0, 2), (4.0, 3)):
        synth = TabularSynthesizer(dom, epsilon, bytes(32), release_every=10)
        assert synth.k == k
    assert TabularSynthesizer(dom, 1.0, bytes(32), release_every=10,
                              workloads_per_step=3).k == 3
