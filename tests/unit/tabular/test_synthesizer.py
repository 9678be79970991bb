"""TabularSynthesizer: API contract, accounting, determinism, snapshot/restore, errors."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.accounting import StepLedger, check_select_measure_budget, select_measure_split
from dpsynth.errors import BudgetExceededError, ConfigError, SchemaError, StateCorruptError
from dpsynth.tabular import Domain, TabularSynthesizer
from dpsynth.tabular.workloads import Workloads
from tests.support.tabular import feed_steps

KEY = bytes(range(32))
DOM = Domain.from_dict({"version": 1, "attributes": [
    {"name": "sex", "categories": ["F", "M"]}, {"name": "age", "size": 6},
    {"name": "job", "size": 5}, {"name": "inc", "categories": ["lo", "hi"]}]})


def _data(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)  # public test data, not privacy noise
    sex = rng.integers(0, 2, n)
    age = np.minimum(rng.poisson(2 + sex), 5)
    job = (age + rng.integers(0, 2, n)) % 5
    inc = (age > 2).astype(int)
    return np.stack([sex, age, job, inc], axis=1)


def _synth(**kw) -> TabularSynthesizer:
    base = dict(release_every=40, workloads_per_step=2)
    base.update(kw)
    return TabularSynthesizer(DOM, 1.0, KEY, **base)


CONFIGS = [dict(), dict(counter="block", block_size=3), dict(counter="unbounded_block"),
           dict(mechanism="baseline"), dict(neighbours="replace", bias="paper"),
           dict(full_domain_limit=10, support_size=300, rejuvenate_every=2),
           dict(estimator="alg3", selection="em"), dict(selection="em", damping=1.0),
           dict(estimator="alg3", fit_rule="paper", neighbours="replace"),
           dict(pooled_marginals=True, score="l1", neighbours="replace")]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_releases_have_the_released_size_and_stay_in_domain(cfg):
    synth = _synth(**cfg)
    releases = feed_steps(synth, _data(130))
    assert [r.step for r in releases] == [1, 2, 3]
    assert [r.sequence for r in releases] == [0, 1, 2]
    assert synth.records_seen == 130 and synth.steps == 3
    forced = synth.step()
    assert forced.step == 4
    rows = [r.records.shape[0] for r in (*releases, forced)]
    if synth.neighbours == "replace":  # the count is public: |f_t| rows
        assert rows == [40, 80, 120, 130]
        assert forced.metadata["records_seen"] == 130
    else:  # privacy: P12 — a noisy size, never the count
        assert rows[-1] == synth.size.rows
        assert "records_seen" not in forced.metadata
    DOM.check_codes(forced.records)
    meta = forced.metadata
    assert meta["key_fingerprint"] == synth._noise.fingerprint()
    assert meta["domain_digest"] == DOM.digest()
    assert {"algorithm", "counter", "epsilon", "neighbours"} <= set(meta)
    assert KEY.hex() not in repr(meta)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_same_key_same_input_identical_releases(cfg):
    data = _data(200)
    a = [r.records.tolist() for r in feed_steps(_synth(**cfg), data)]
    b = [r.records.tolist() for r in feed_steps(_synth(**cfg), data)]
    assert a == b
    other = TabularSynthesizer(DOM, 1.0, bytes(32), release_every=40, workloads_per_step=2,
                               **cfg)
    assert [r.records.tolist() for r in feed_steps(other, data)] != a


@pytest.mark.parametrize("cfg", CONFIGS)
def test_snapshot_restore_continues_identically(cfg):
    data = _data(330, seed=3)
    full = _synth(**cfg)
    expected = [r.records.tolist() for r in feed_steps(full, data)]
    first = _synth(**cfg)
    got = [r.records.tolist() for r in feed_steps(first, data[:157])]  # mid-step snapshot
    restored = TabularSynthesizer.restore(first.snapshot(), KEY)
    assert restored.records_seen == 157 and restored.public_config() == first.public_config()
    got += [r.records.tolist() for r in feed_steps(restored, data[157:])]
    assert got == expected


def test_restore_refuses_other_key_and_damage():
    blob = _synth().snapshot()
    with pytest.raises(StateCorruptError, match="different noise key"):
        TabularSynthesizer.restore(blob, bytes(32))
    with pytest.raises(StateCorruptError):
        TabularSynthesizer.restore(blob[:-5], KEY)
    assert b"\x00\x01\x02\x03\x04\x05\x06\x07" not in blob  # no key material


def test_partition_changes_noise():
    data = _data(120)
    a = [r.records.tolist() for r in feed_steps(_synth(), data)]
    b = [r.records.tolist() for r in feed_steps(_synth(partition=1), data)]
    assert a != b


def test_accounting_per_step_and_whole_stream():
    synth = _synth(workloads_per_step=3, selection="em")  # add/remove: ε_n = 0.1ε for the size
    assert synth.eps_size == pytest.approx(0.1)
    assert synth.eps_select == synth.eps_measure == pytest.approx(0.9 / 6)
    assert synth.worst_case_loss == pytest.approx(1.0)
    feed_steps(synth, _data(200))
    assert synth.ledger.steps == 5
    assert synth.ledger.max_spent == pytest.approx(1.0)  # ε_n + selections + measurements
    public = _synth(workloads_per_step=3, neighbours="replace", selection="em")  # public count
    assert public.eps_size == 0 and public.eps_select == pytest.approx(1.0 / 6)
    cyclic = _synth(workloads_per_step=3)  # the public schedule spends nothing on selection
    assert cyclic.eps_select == 0 and cyclic.eps_measure == pytest.approx(0.9 / 3)
    assert cyclic.worst_case_loss == pytest.approx(1.0)
    # a selection beyond k in one step is refused by the ledger
    ledger = StepLedger(1.0)
    for _ in range(3):
        ledger.charge("select", 1 / 6)
        ledger.charge("measure", 1 / 6)
    with pytest.raises(BudgetExceededError):
        ledger.charge("select", 1 / 6)
    with pytest.raises(BudgetExceededError):
        check_select_measure_budget(1.0, 3, 0.2, 0.2)
    assert select_measure_split(2.0, 4) == (0.25, 0.25)


def test_k_is_capped_and_em_sensitivity_is_one_over_smallest_workload():
    synth = _synth(workloads_per_step=50)
    assert synth.k == len(Workloads(DOM.sizes)) == 6
    assert synth.em_sensitivity == pytest.approx(1 / 4)
    assert _synth(neighbours="replace").em_sensitivity == pytest.approx(1 / 2)


def test_selection_is_without_replacement_within_a_step():
    synth = _synth(workloads_per_step=6)
    feed_steps(synth, _data(40))
    assert sorted(synth.last_selected) == list(range(6))


def test_unselected_remainder_follows_alg3():
    synth = _synth(workloads_per_step=1, estimator="alg3")
    feed_steps(synth, _data(80))
    chosen = synth.last_selected[0]
    answers = synth.model.answers()
    for i, r in enumerate(synth.remainders):
        if i != chosen:
            assert np.allclose(r, answers[i] - synth.counters[i].value)


def test_bad_configuration_and_input():
    with pytest.raises(ConfigError, match="mechanism"):
        _synth(mechanism="pgm")
    with pytest.raises(ConfigError, match="counter"):
        _synth(counter="tree")
    with pytest.raises(ConfigError, match="release_every"):
        _synth(release_every=0)
    with pytest.raises(SchemaError, match="attribute 'age'"):
        feed_steps(_synth(), np.array([[0, 9, 0, 0]]))


# -- issue 13: public steps and private counts under add/remove (docs/privacy.md P11, P12) ------


def test_P11_extend_is_refused_under_add_remove_and_steps_come_from_step():
    synth = _synth()
    with pytest.raises(ConfigError, match=r"add\(codes\).*step\(\)"):
        synth.extend(_data(40))
    synth.add(_data(7))
    assert synth.tick().step == 1  # a marker always ends the step under add/remove
    assert synth.tick().step == 2  # ... even an empty one (emptiness is private)
    public = _synth(neighbours="replace")
    assert public.tick() is None  # nothing new: the count is public, no release
    public.add(_data(7))
    assert public.tick().records.shape == (7, 4)


def test_P12_count_dependent_variants_are_refused_under_add_remove():
    with pytest.raises(ConfigError, match="public only under replacement"):
        _synth(pooled_marginals=True)
    _synth(estimator="sample")  # counter shares divide by the counters' own noisy totals
    with pytest.raises(BudgetExceededError, match="size counter"):
        check_select_measure_budget(1.0, 2, 0.25, 0.25, size_epsilon=0.1)
    assert check_select_measure_budget(1.0, 2, *select_measure_split(1.0, 2, 0.1), 0.1) == (
        pytest.approx(1.0))


@pytest.mark.parametrize("mechanism", ["proposed", "baseline"])
def test_P12_neighbouring_streams_release_noisy_sizes_not_the_count(mechanism):
    """Across 200 keys, 50 and 51 records give row counts whose difference has mean ≈ 1 and
    whose spread is the size counter's noise: the size is never the count itself. Each key's
    metadata is identical for the two neighbours. Bounds are ≥ 6 standard errors wide (false
    alarm < 1e-8)."""
    data = _data(51, seed=9)
    rows = {50: [], 51: []}
    for seed in range(200):
        key = seed.to_bytes(32, "big")
        metas = []
        for n in rows:
            synth = TabularSynthesizer(DOM, 1.0, key, release_every=1, mechanism=mechanism,
                                       workloads_per_step=2)
            synth.add(data[:n])
            release = synth.step()
            rows[n].append(release.records.shape[0])
            metas.append(release.metadata)
        assert metas[0] == metas[1]
    a, b = np.array(rows[50]), np.array(rows[51])
    assert len(set(a.tolist())) > 10  # the released size varies with the key
    # one noisy sum Lap_Z(2/ε_n) = Lap_Z(20): sd ≈ 28; clipping at 0 is rare at 50
    assert 20 < a.std() < 36
    assert abs(a.mean() - 50) < 6 * 28 / np.sqrt(200)
    # derived noise: the same key draws the same size noise (up to the clip at 0 rows)
    assert np.all((b - a == 1) | ((a == 0) & (b <= 1)))
