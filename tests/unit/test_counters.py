"""Binary Mechanism, Sparse Counting and Inhomogeneous Sparse Counting: deterministic properties.

Distributional properties live in tests/statistical/test_counters_distribution.py and the
level-form ≡ scalar-form property in tests/conformance/test_counters.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from dpsynth.clock import TickClock
from dpsynth.counters import BinaryMechanism, InhomogeneousSparseCounter, SparseCounter
from dpsynth.counters.binary import binary_levels, node_noise
from dpsynth.counters.sparse import check_event
from dpsynth.noise import KeyedNoise

KEY = bytes(range(32))


class SpyNoise(KeyedNoise):
    """KeyedNoise that records the (scale, context) of every discrete-Laplace request."""

    __slots__ = ("laplace_calls", "geometric_draws")

    def __init__(self, key: bytes) -> None:
        super().__init__(key)
        self.laplace_calls: list[tuple[float, tuple[int | str, ...], int]] = []
        self.geometric_draws = 0

    def discrete_laplace_at(self, scale, context, streams, events):  # type: ignore[no-untyped-def]
        out = super().discrete_laplace_at(scale, context, streams, events)
        self.laplace_calls.append((scale, tuple(context), out.size))
        return out

    def geometric_at(self, p, context, streams, events):  # type: ignore[no-untyped-def]
        out = super().geometric_at(p, context, streams, events)
        self.geometric_draws += out.size
        return out


# -- Binary Mechanism -----------------------------------------------------------------------


def test_binary_mechanism_error_is_the_sum_of_its_covering_nodes() -> None:
    noise = KeyedNoise(KEY)
    bm = BinaryMechanism(epsilon=0.5, horizon=100, noise=noise, context=("t",), stream=7)
    assert bm.levels == 7 and bm.scale == 14.0
    rng = np.random.default_rng(0)
    total = 0
    for step in range(1, 101):
        x = int(rng.integers(0, 4))
        bm.update(x)
        total += x
        expected = node_noise(noise, 14.0, ("t", "bm"), np.array([7]), np.array([step]), 7)[0]
        assert bm.value() == total + expected
        assert isinstance(bm.value(), int)
    with pytest.raises(ValueError, match="horizon"):
        bm.update(0)


def test_binary_mechanism_nodes_are_shared_between_steps() -> None:
    # steps 6 = 4+2 and 7 = 4+2+1 share the nodes (2, 1) and (1, 3): the difference of their
    # errors is exactly the noise of node (0, 7)
    noise = KeyedNoise(KEY)
    s = np.array([0, 0, 0])
    e = node_noise(noise, 3.0, ("n",), s, np.array([6, 7, 1]), 3)
    n07 = node_noise(noise, 3.0, ("n",), s[:1], np.array([7]), 1)  # only bit 0 of 7
    assert e[1] - e[0] == n07[0]


@pytest.mark.parametrize("horizon,levels", [(1, 1), (2, 2), (1023, 10), (1024, 11)])
def test_binary_levels(horizon: int, levels: int) -> None:
    assert binary_levels(horizon) == levels == math.ceil(math.log2(horizon + 1))


# -- Sparse Counting ------------------------------------------------------------------------


def alg2_verbatim(
    xs: Sequence[int], epsilon: float, noise: KeyedNoise, context: tuple[int | str, ...]
) -> list[int]:
    """HVZ Alg 2 transcribed line by line (with C.6's ``t < T``), Boolean input, on our noise.

    The noise of check number c at time t is the direct reference's address, so a faithful
    SparseCounter(lazy=False) must reproduce this output exactly.
    """
    horizon = len(xs)
    t0 = 9 * math.log(horizon) / epsilon
    bm = BinaryMechanism(epsilon / 2, horizon, noise, context)
    j, t, n_tilde, out = 0, 0, 0, []

    def lap(purpose: str, event: int) -> int:
        return int(noise.discrete_laplace_at(2 / epsilon, (*context, purpose), 0, event)[0])

    closures_at: dict[int, int] = {}
    while t < horizon:
        n_j = 0
        t_tilde = math.floor(t0) + lap("thr", j)
        while t < horizon:
            c = closures_at.get(t, 0)
            if n_j + lap("check", check_event(t, c)) > t_tilde:
                closures_at[t] = c + 1
                break
            t += 1
            n_j += xs[t - 1]
            out.append(n_tilde)
        j += 1
        if t < horizon:
            bm.update(n_j)
            n_tilde = bm.value()
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("epsilon,horizon", [(1.0, 40), (3.0, 25), (0.5, 12), (8.0, 30)])
def test_P3_one_record_per_tick_is_alg2_verbatim(seed: int, epsilon: float, horizon: int) -> None:
    rng = np.random.default_rng(seed)
    xs = rng.integers(0, 2, horizon).tolist()
    noise = KeyedNoise(bytes([seed]) * 32)
    counter = SparseCounter(epsilon, horizon, noise, ("alg2",), lazy=False)
    outputs = []
    for x in xs:
        counter.update(x)
        outputs.append(counter.value())
    assert outputs == alg2_verbatim(xs, epsilon, noise, ("alg2",))


def test_sparse_counter_closes_segments_and_counts_exactly() -> None:
    counter = SparseCounter(4.0, 200, KeyedNoise(KEY), ("dense",))
    for _ in range(200):
        counter.update(3)
    # T0 = 9 ln 200 / 4 ≈ 11.9: with 3 per tick, segments close every ~4-5 ticks
    assert 25 <= counter.segment <= 70
    assert counter.true_total == 600
    assert abs(counter.value() - 600) < 100  # stale by the open segment plus BM noise


def test_untouched_sparse_counter_draws_nothing_per_tick() -> None:
    noise = SpyNoise(KEY)
    counter = SparseCounter(1.0, 1000, noise, ("idle",))
    after_init = (len(noise.laplace_calls), noise.geometric_draws)
    for _ in range(999):
        counter.update(0)
    assert counter.segment == 0  # a closure on zeros has probability < 1e-9 here
    assert (len(noise.laplace_calls), noise.geometric_draws) == after_init


def test_sparse_counter_redraws_only_when_the_count_leaves_its_window() -> None:
    noise = SpyNoise(KEY)
    counter = SparseCounter(0.05, 10_000, noise, ("touch",))  # T0 ≈ 1658, scale 40: W ≈ 1178
    base = noise.geometric_draws
    for x in [0, 2, 0, 0, 1, 0] * 10:
        counter.update(x)
    assert noise.geometric_draws == base  # far below the threshold: no redraw at all
    counter.update(2000)  # jumps past the window: one new candidate process
    assert noise.geometric_draws - base >= 1


def test_sparse_counter_refuses_bad_input() -> None:
    counter = SparseCounter(1.0, 2, KeyedNoise(KEY), ("bad",))
    with pytest.raises(ValueError, match="non-negative"):
        counter.update(-1)
    counter.update(1)
    counter.update(1)
    with pytest.raises(ValueError, match="horizon"):
        counter.update(1)


# -- Inhomogeneous Sparse Counting ----------------------------------------------------------


def run_isc(
    xs: Sequence[int], clock: TickClock, r0: int, noise: KeyedNoise, level_eps: float = 0.5
) -> list[int]:
    counter = InhomogeneousSparseCounter(
        lambda r: level_eps * 2.0 ** (-0.3 * r), r0, clock, noise, ("isc",), first_tick=0
    )
    values = []
    for x in xs:
        counter.update(x)
        values.append(counter.value())
    return values


@pytest.mark.parametrize("r0", [1, 3, 5])
def test_P5_data_before_the_start_level_is_never_counted(r0: int) -> None:
    clock = TickClock(epsilon=1.0, release_every=2)
    ticks = clock.ticks_before_level(7)
    before = clock.ticks_before_level(r0)
    rng = np.random.default_rng(r0)
    xs = rng.integers(0, 5, ticks).tolist()
    ys = [0] * before + xs[before:]  # same stream with the pre-t_{r0} data erased
    assert run_isc(xs, clock, r0, KeyedNoise(KEY)) == run_isc(ys, clock, r0, KeyedNoise(KEY))
    zs = xs[:before] + [x + 1 for x in xs[before:]]  # data from t_{r0} on does count
    assert run_isc(xs, clock, r0, KeyedNoise(KEY)) != run_isc(zs, clock, r0, KeyedNoise(KEY))


def test_P5_per_level_noise_scales_and_budget_are_as_specified() -> None:
    # spec A.5.3 table: threshold and check Lap_Z(4/ε_r), T0 = 18 ln(T_r)/ε_r, BM at ε_r/4,
    # S̃ update Lap_Z(2/ε_r): total ε_r per level
    noise = SpyNoise(KEY)
    clock = TickClock(epsilon=1.0, release_every=3)
    eps = {r: 0.2 * 1.5**-r for r in range(12)}
    counter = InhomogeneousSparseCounter(eps.__getitem__, 2, clock, noise, ("isc",))
    for r in range(2, 9):
        inner = counter._inner
        assert inner is not None and counter.level == r
        horizon = clock.ticks_in_level(r)
        assert inner.horizon == horizon
        assert inner.scale == pytest.approx(4 / eps[r])
        assert inner.threshold == pytest.approx(18 * math.log(horizon) / eps[r])
        bm = inner._bm
        assert bm.scale == pytest.approx(binary_levels(horizon) / (eps[r] / 4))
        for _ in range(horizon):
            counter.update(50)  # frequent closures: every draw kind occurs
        ends = [s for s, ctx, _ in noise.laplace_calls if ctx == ("isc", "level", r, "end")]
        assert ends == [pytest.approx(2 / eps[r])]
        spent = 1 / inner.scale + bm.levels / bm.scale + 1 / ends[0]  # SVT + BM + S̃
        assert spent == pytest.approx(eps[r])
        scales_used = {s for s, ctx, _ in noise.laplace_calls if ctx[:3] == ("isc", "level", r)}
        allowed = np.array([4 / eps[r], bm.scale, 2 / eps[r]])
        assert all(np.isclose(allowed, s, rtol=1e-12).any() for s in scales_used)
        bm_used = bm.steps > 0  # BM nodes are drawn only when a segment closes
        assert len(scales_used) == (3 if bm_used and bm.levels > 1 else 2)


def test_P5_empty_levels_draw_no_noise() -> None:
    noise = SpyNoise(KEY)
    clock = TickClock(epsilon=4.0, release_every=1)  # levels 0 and 1 are empty
    counter = InhomogeneousSparseCounter(lambda r: 1.0, 0, clock, noise, ("e",), first_tick=0)
    assert counter.level == 2
    for _ in range(clock.ticks_in_level(2) + clock.ticks_in_level(3)):
        counter.update(1)
    levels_drawn = {ctx[2] for _, ctx, _ in noise.laplace_calls}
    assert levels_drawn == {2, 3, 4}


def test_P2_counters_are_deterministic_per_key_and_differ_across_keys() -> None:
    clock = TickClock(epsilon=1.0, release_every=1)
    xs = [1, 0, 3] * 60
    a = run_isc(xs, clock, 0, KeyedNoise(KEY), level_eps=2.0)
    b = run_isc(xs, clock, 0, KeyedNoise(KEY), level_eps=2.0)
    c = run_isc(xs, clock, 0, KeyedNoise(bytes(32)), level_eps=2.0)
    assert a == b
    assert a != c
