"""Accurate mode: normalised schedule, exact GLS, pooled splits, fresh option (issue 5)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dpsynth.accounting import check_budget, worst_case_loss
from dpsynth.errors import BudgetExceededError
from dpsynth.noise import KeyedNoise, discrete_laplace_variance
from dpsynth.online.accurate import accurate_schedule, gls_tree, split_by_fractions
from dpsynth.online.synthesizer import OnlineSynthesizer

KEY = bytes(range(32))


@pytest.mark.parametrize("d", range(1, 11))
@pytest.mark.parametrize("max_depth", [3, 20, 40])
def test_P8_every_path_spends_exactly_half_epsilon(d: int, max_depth: int) -> None:
    schedule = accurate_schedule(d, 1.0, max_depth)
    for s in range(1, 41):
        assert schedule.path_loss(s) == pytest.approx(0.5, rel=1e-12)
        assert all(schedule.level_epsilon(j, s) == 0 for j in range(min(s, max_depth) + 1, 45))
    assert schedule.path_loss(0) == 0
    loss = check_budget(schedule, max_level=40)
    assert loss <= 1.0 + 1e-12


def test_P8_an_overspending_accurate_schedule_is_refused() -> None:
    schedule = accurate_schedule(2, 1.0, 20)
    inflated = dataclasses.replace(
        schedule, level_epsilon=lambda j, r: schedule.level_epsilon(j, r) * (1.002 if j == 3 else 1)
    )
    assert worst_case_loss(inflated, max_level=40)[0] > 1.0
    with pytest.raises(BudgetExceededError, match="j=3"):
        check_budget(inflated, max_level=40)
    with pytest.raises(BudgetExceededError):
        OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=10, schedule=inflated)


def dense_gls(noisy: list[np.ndarray], variances: list[float], root: float) -> list[np.ndarray]:
    """Constrained weighted least squares by a KKT solve over all nodes of depths 1..m."""
    sizes = [level.size for level in noisy]
    offsets = np.cumsum([0, *sizes])
    n = offsets[-1]
    z = np.concatenate(noisy).astype(float)
    w = np.concatenate([np.full(size, 1 / v) for size, v in zip(sizes, variances, strict=True)])
    rows = [np.zeros(n)]
    rows[0][offsets[0]:offsets[1]] = 1.0  # depth 1 sums to the known root
    rhs = [root]
    for j in range(len(noisy) - 1):
        for p in range(sizes[j]):
            row = np.zeros(n)
            row[offsets[j] + p] = 1.0
            row[offsets[j + 1] + 2 * p] = -1.0
            row[offsets[j + 1] + 2 * p + 1] = -1.0
            rows.append(row)
            rhs.append(0.0)
    a = np.array(rows)
    k = a.shape[0]
    kkt = np.block([[np.diag(2 * w), a.T], [a, np.zeros((k, k))]])
    solution = np.linalg.solve(kkt, np.concatenate([2 * w * z, rhs]))[:n]
    return [solution[offsets[j]:offsets[j + 1]] for j in range(len(noisy))]


@pytest.mark.parametrize("seed", range(12))
def test_gls_equals_the_dense_least_squares_solution(seed: int) -> None:
    rng = np.random.default_rng(seed)
    depth = int(rng.integers(1, 6))
    noisy = [rng.normal(50 / 2**j, 10, 2**j) for j in range(1, depth + 1)]
    variances = list(rng.uniform(0.5, 400, depth))
    root = float(rng.integers(0, 200))
    fast = gls_tree(noisy, variances, root)
    dense = dense_gls(noisy, variances, root)
    for a, b in zip(fast, dense, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9)
    parent = np.array([root])
    for level in fast:
        np.testing.assert_allclose(level.reshape(-1, 2).sum(axis=1), parent, atol=1e-9)
        parent = level


def test_split_by_fractions_sums_and_ties() -> None:
    rng = np.random.default_rng(0)
    parents = rng.integers(0, 1000, 64)
    weights = rng.normal(0, 10, 128)
    out = split_by_fractions(parents, weights).reshape(-1, 2)
    assert (out >= 0).all()
    np.testing.assert_array_equal(out.sum(axis=1), parents)
    both_clipped = (np.clip(weights.reshape(-1, 2), 0, None).sum(axis=1) == 0)
    assert (np.abs(out[both_clipped, 0] - out[both_clipped, 1]) <= 1).all()


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("fresh", [0.0, 0.1])
def test_accurate_releases_are_exact_nonnegative_and_deterministic(d: int, fresh: float) -> None:
    x = np.random.default_rng(d).random((3000, d)) ** 2
    runs = []
    for _ in range(2):
        synth = OnlineSynthesizer(
            d=d, epsilon=1.0, key=KEY, release_every=250, mechanism="accurate", fresh=fresh
        )
        runs.append(synth.extend(x))
    assert runs[0] == runs[1]
    for release in runs[0]:
        assert release.leaf_counts.min() >= 0 and release.leaf_counts.sum() == release.t
        assert release.points.shape == (release.t, d)
        assert release.metadata["schedule"] == "accurate"
        assert release.metadata["schedule_params"]["fresh"] == fresh


def test_P8_level_end_noise_has_the_scheduled_scale() -> None:
    calls: list[tuple[float, tuple[int | str, ...]]] = []

    class Spy(KeyedNoise):
        __slots__ = ()

        def discrete_laplace_at(self, scale, context, streams, events):  # type: ignore[no-untyped-def]
            calls.append((scale, tuple(context)))
            return super().discrete_laplace_at(scale, context, streams, events)

    synth = OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=100, mechanism="accurate",
                              fresh=0.0)
    spy = Spy(KEY)
    synth._noise = spy
    synth._mechanism.tree._noise = spy
    synth.extend(np.random.default_rng(0).random((2047, 2)))  # levels 0..10 complete
    schedule = synth._mechanism.schedule
    ends = [(scale, ctx) for scale, ctx in calls if ctx[-1] == "end"]
    assert len(ends) == sum(range(1, 11))  # level r draws depths 1..r
    for scale, ctx in ends:
        j, r = ctx[ctx.index("depth") + 1], ctx[ctx.index("level") + 1]
        assert scale == pytest.approx(1 / schedule.level_epsilon(j, r))
    assert discrete_laplace_variance(2.0) > 0


def test_without_fresh_the_splits_move_only_at_level_ends() -> None:
    synth = OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=100, mechanism="accurate",
                              fresh=0.0)
    fresh = OnlineSynthesizer(
        d=2, epsilon=1.0, key=KEY, release_every=100, mechanism="accurate", fresh=0.1
    )
    x = np.random.default_rng(1).random((4000, 2))
    plain, moving = synth.extend(x), fresh.extend(x)
    # t = 2100 and 2200 lie in time level 11 (2048..4095): same pooled fractions without fresh
    a, b = (r for r in plain if r.t in (2100, 2200))
    assert a.depth == b.depth
    frac_a = a.leaf_counts / a.t
    frac_b = b.leaf_counts / b.t
    assert np.abs(frac_a - frac_b).max() < 2 / a.t * 4  # only rounding of a larger root
    fa, fb = (r for r in moving if r.t in (2100, 2200))
    assert np.abs(fa.leaf_counts / fa.t - fb.leaf_counts / fb.t).max() > 8 / a.t
