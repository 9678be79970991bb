"""TabularSynthesizer: API contract, accounting, determinism, snapshot/restore, errors."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.accounting import StepLedger, check_select_measure_budget, select_measure_split
from dpsynth.errors import BudgetExceededError, ConfigError, SchemaError, StateCorruptError
from dpsynth.tabular import Domain, TabularSynthesizer
from dpsynth.tabular.workloads import Workloads

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
           dict(estimator="sample", fit_rule="paper"),
           dict(pooled_marginals=True, score="l1")]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_releases_have_the_record_count_and_stay_in_domain(cfg):
    synth = _synth(**cfg)
    releases = synth.extend(_data(130))
    assert [r.step for r in releases] == [1, 2, 3]
    assert [r.sequence for r in releases] == [0, 1, 2]
    assert [r.records.shape for r in releases] == [(40, 4), (80, 4), (120, 4)]
    assert synth.records_seen == 130 and synth.steps == 3
    forced = synth.step()
    assert forced.step == 4 and forced.records.shape == (130, 4)
    DOM.check_codes(forced.records)
    meta = forced.metadata
    assert meta["key_fingerprint"] == synth._noise.fingerprint()
    assert meta["domain_digest"] == DOM.digest()
    assert {"algorithm", "counter", "epsilon", "neighbours"} <= set(meta)
    assert KEY.hex() not in repr(meta)


@pytest.mark.parametrize("cfg", CONFIGS)
def test_same_key_same_input_identical_releases(cfg):
    data = _data(200)
    a = [r.records.tolist() for r in _synth(**cfg).extend(data)]
    b = [r.records.tolist() for r in _synth(**cfg).extend(data)]
    assert a == b
    other = TabularSynthesizer(DOM, 1.0, bytes(32), release_every=40, workloads_per_step=2,
                               **cfg)
    assert [r.records.tolist() for r in other.extend(data)] != a


@pytest.mark.parametrize("cfg", CONFIGS)
def test_snapshot_restore_continues_identically(cfg):
    data = _data(330, seed=3)
    full = _synth(**cfg)
    expected = [r.records.tolist() for r in full.extend(data)]
    first = _synth(**cfg)
    got = [r.records.tolist() for r in first.extend(data[:157])]  # mid-step snapshot
    restored = TabularSynthesizer.restore(first.snapshot(), KEY)
    assert restored.records_seen == 157 and restored.public_config() == first.public_config()
    got += [r.records.tolist() for r in restored.extend(data[157:])]
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
    a = [r.records.tolist() for r in _synth().extend(data)]
    b = [r.records.tolist() for r in _synth(partition=1).extend(data)]
    assert a != b


def test_accounting_per_step_and_whole_stream():
    synth = _synth(workloads_per_step=3)
    assert synth.eps_select == synth.eps_measure == pytest.approx(1.0 / 6)
    assert synth.worst_case_loss == pytest.approx(1.0)
    synth.extend(_data(200))
    assert synth.ledger.steps == 5
    assert synth.ledger.max_spent == pytest.approx(1.0)  # ε/2 selection + ε/2 measurement
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
    synth.extend(_data(40))
    assert sorted(synth.last_selected) == list(range(6))


def test_unselected_remainder_follows_alg3():
    synth = _synth(workloads_per_step=1)
    synth.extend(_data(80))
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
        _synth().extend(np.array([[0, 9, 0, 0]]))
