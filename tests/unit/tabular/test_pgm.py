"""PGM fit (dpsynth.tabular.pgm): accuracy on noiseless measurements, determinism, snapshots,
and the error when the optional extra is absent. Needs ``mbi`` except the last test."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise
from dpsynth.tabular import Domain, TabularSynthesizer
from dpsynth.tabular.model import ParticleModel
from dpsynth.tabular.workloads import Workloads
from tests.support.tabular import feed_steps

KEY = bytes(range(32))
SIZES = (2, 3, 2, 4)


def _data(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)  # public test data, not privacy noise
    a = rng.integers(0, 2, n)
    b = (a + rng.integers(0, 2, n)) % 3
    c = rng.integers(0, 2, n)
    d = np.where(rng.random(n) < 0.9, b, 3)
    return np.stack([a, b, c, d], axis=1)


def _model(**kw) -> ParticleModel:
    opts = dict(support_size=400, full_domain_limit=1000)
    opts.update(kw)
    return ParticleModel.initial(Workloads(SIZES), KeyedNoise(KEY), ("test", "support"), **opts)


@pytest.mark.parametrize("full_domain_limit", [1000, 10])
def test_fit_matches_noiseless_measurements(full_domain_limit):
    pytest.importorskip("mbi")
    from dpsynth.tabular.pgm import PGMFit

    model = _model(full_domain_limit=full_domain_limit)
    assert model.full == (full_domain_limit == 1000)
    x = _data(2000)
    truth = model.workloads.answers(x)
    start = np.full(model.weights.size, 2000 / model.weights.size)
    measured = [(0, truth[0]), (4, truth[4])]  # pairs (a, b) and (b, d)
    out = PGMFit(model, stddev=1.0)(start, measured, passes=20)
    assert out.sum() == pytest.approx(2000.0)
    for i, table in measured:
        err = np.abs(model.answer(i, out) - table).sum() / 2000
        assert err < 0.02, (i, err)
    if model.full:  # c is covered by no measurement: it keeps the start's (uniform) marginal
        c = np.bincount(model.support[:, 2], weights=out, minlength=2)
        assert np.abs(c - 1000).max() < 0.02 * 2000


def test_fit_on_full_domain_is_max_entropy_for_unmeasured_pairs():
    pytest.importorskip("mbi")
    from dpsynth.tabular.pgm import PGMFit

    model = _model()
    x = _data(2000)
    truth = model.workloads.answers(x)
    start = np.full(model.weights.size, 2000 / model.weights.size)
    out = PGMFit(model, stddev=1.0)(start, [(0, truth[0]), (4, truth[4])], passes=1)
    # (a, d) was not measured: a ⟂ d given b, so its table is Σ_b P(a,b)P(d|b)
    ab = truth[0].reshape(2, 3)
    bd = truth[4].reshape(3, 4)
    expected = ab @ (bd / bd.sum(axis=1, keepdims=True))
    assert np.allclose(model.answer(2, out).reshape(2, 4), expected, atol=0.01 * 2000)


def _synth(**kw) -> TabularSynthesizer:
    dom = Domain.from_dict({"a": 2, "b": 3, "c": 2, "d": 4})
    base = dict(release_every=100, workloads_per_step=1, fit="pgm", estimator="alg3",
                selection="em")
    base.update(kw)
    return TabularSynthesizer(dom, 2.0, KEY, **base)


def test_same_key_same_releases_and_restore_equals_uninterrupted():
    pytest.importorskip("mbi")
    x = _data(500, seed=1)
    a = [r.records for r in feed_steps(_synth(), x)]
    first = _synth()
    b = [r.records for r in feed_steps(first, x[:200])]
    restored = TabularSynthesizer.restore(first.snapshot(), KEY)
    b += [r.records for r in feed_steps(restored, x[200:])]
    assert len(a) == len(b) == 5
    for ra, rb in zip(a, b, strict=True):
        assert np.array_equal(ra, rb)
    assert restored.metadata()["fit"] == "pgm"


def test_pgm_tracks_marginals_better_than_uniform():
    pytest.importorskip("mbi")
    x = _data(1000, seed=2)
    synth = _synth(workloads_per_step=2, release_every=250)
    release = feed_steps(synth, x)[-1]
    w = synth.workloads
    errs = [np.abs(w.answer(release.records, i) - w.answer(x, i)).sum() / 1000
            for i in range(len(w))]
    uniform = [np.abs(1000 / c - w.answer(x, i)).sum() / 1000 for i, c in enumerate(w.cells)]
    assert np.mean(errs) < 0.5 * np.mean(uniform)


def test_missing_mbi_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mbi", None)  # `import mbi` now raises ImportError
    with pytest.raises(ConfigError, match=r"pip install 'dpsynth\[pgm\]'"):
        _synth()
    _synth(fit="mw")  # the default fit does not need it


def test_bad_pgm_options():
    pytest.importorskip("mbi")
    from dpsynth.tabular.pgm import PGMFit

    with pytest.raises(ConfigError, match="stddev"):
        PGMFit(_model(), stddev=0.0)
    with pytest.raises(ConfigError, match="iters"):
        PGMFit(_model(), stddev=1.0, iters=0)
