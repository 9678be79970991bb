"""The eval layer: exact W1, its tree upper and sliced lower bounds, i.i.d. floors, range queries.

Reference-numbers §4.1 (W1 estimators and floors), accuracy-study §1.3 (tree bound looseness).
Every instance is seeded; the whole file runs in a few seconds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from dpsynth.eval import (
    BOX_SIDES,
    default_tree_depth,
    iid_floor,
    iid_floor_generated,
    level_diameters,
    random_boxes,
    range_counts,
    relative_range_error,
    w1_exact,
    w1_sliced_lower,
    w1_tree_upper,
)
from dpsynth.eval import queries as queries_module
from dpsynth.tree import cell_diameter

TOL = 1e-12


def _instances() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Named random pairs (x, y) in [0,1]^d: sizes equal and unequal, d = 1, 2, 3."""
    out = []
    rng = np.random.default_rng(20240611)
    for d in (1, 2, 3):
        for n, m in ((1, 1), (7, 7), (40, 40), (60, 25), (13, 150), (200, 200)):
            # uniform
            out.append((f"uniform-d{d}-{n}x{m}", rng.random((n, d)), rng.random((m, d))))
        # shifted: a real gap between the laws
        out.append((f"shifted-d{d}", rng.random((80, d)) * 0.5, 0.4 + rng.random((50, d)) * 0.6))
        # on the dyadic grid: many points on cell boundaries, many exact duplicates
        out.append(
            (f"grid-d{d}", rng.integers(0, 9, (70, d)) / 8.0, rng.integers(0, 9, (45, d)) / 8.0)
        )
        # clustered: tight blobs, the tree's worst case for the leaf term
        c = rng.random((1, d))
        out.append(
            (
                f"blob-d{d}",
                np.clip(c + 0.01 * rng.standard_normal((90, d)), 0, 1),
                np.clip(c + 0.02 * rng.standard_normal((30, d)), 0, 1),
            )
        )
    return out


INSTANCES = _instances()
IDS = [name for name, _, _ in INSTANCES]


# --- exact W1 ------------------------------------------------------------------------------


def test_exact_two_point_masses_chebyshev_and_euclidean() -> None:
    assert w1_exact([[0.1, 0.1]], [[0.4, 0.2]]).value == pytest.approx(0.3)
    assert w1_exact([[0.0, 0.0]], [[0.3, 0.4]], metric="euclidean").value == pytest.approx(0.5)
    assert w1_exact([[0.0, 0.0]], [[0.3, 0.4]]).value == pytest.approx(0.4)


def test_exact_hand_computed_transport() -> None:
    # two parallel pairs: every unit moves 0.2
    x, y = [[0.0, 0.0], [1.0, 0.0]], [[0.0, 0.2], [1.0, 0.2]]
    assert w1_exact(x, y).value == pytest.approx(0.2)
    # unequal sizes: one atom split in halves to distances 0.2 and 0.6
    est = w1_exact([[0.0, 0.0]], [[0.2, 0.0], [0.6, 0.0]])
    assert est.value == pytest.approx(0.4)
    assert (est.method, est.n_used, est.subsampled) == ("emd2", 1, False)


def test_exact_d1_matches_scipy_and_sorted_formula() -> None:
    rng = np.random.default_rng(5)
    u, v = rng.random(37), rng.random(101) ** 2
    est = w1_exact(u, v)
    assert est.method == "sorted-1d"
    assert est.value == pytest.approx(wasserstein_distance(u, v), abs=TOL)
    # d = 1: the axis projection of the sliced bound is the whole distance (n ≠ m quantiles)
    assert w1_sliced_lower(u, v, n_projections=0) == pytest.approx(est.value, abs=TOL)
    import ot

    cost = ot.dist(u[:, None], v[:, None], metric="euclidean")
    emd = ot.emd2(np.full(37, 1 / 37), np.full(101, 1 / 101), cost)
    assert float(emd) == pytest.approx(est.value, abs=1e-9)


def test_exact_subsamples_past_max_points_reproducibly() -> None:
    rng = np.random.default_rng(6)
    x, y = rng.random((60, 2)), rng.random((30, 2))
    est = w1_exact(x, y, max_points=50, seed=3)
    assert est.subsampled and est.n_used == 50
    assert est == w1_exact(x, y, max_points=50, seed=3)
    small = w1_exact(x[:40], y, max_points=50)
    assert not small.subsampled and small.n_used == 40


def test_exact_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="share d"):
        w1_exact(np.zeros((3, 2)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="metric"):
        w1_exact(np.zeros((3, 2)), np.zeros((3, 2)), metric="cosine")
    with pytest.raises(ValueError, match="non-empty"):
        w1_exact(np.zeros((0, 2)), np.zeros((3, 2)))


# --- the bracket: sliced ≤ exact ≤ tree ---------------------------------------------------


@pytest.mark.parametrize(("name", "x", "y"), INSTANCES, ids=IDS)
def test_bracket_chebyshev(name: str, x: np.ndarray, y: np.ndarray) -> None:
    exact = w1_exact(x, y).value
    assert w1_tree_upper(x, y) >= exact - TOL
    assert w1_tree_upper(x, y, depth=2) >= exact - TOL
    assert w1_sliced_lower(x, y, n_projections=50, seed=1) <= exact + TOL


@pytest.mark.parametrize(("name", "x", "y"), INSTANCES[::3], ids=IDS[::3])
def test_bracket_euclidean(name: str, x: np.ndarray, y: np.ndarray) -> None:
    exact = w1_exact(x, y, metric="euclidean").value
    assert w1_tree_upper(x, y, metric="euclidean") >= exact - TOL
    assert w1_sliced_lower(x, y, n_projections=50, metric="euclidean") <= exact + TOL


def test_equal_measures_give_zero_for_all_three() -> None:
    rng = np.random.default_rng(7)
    x = rng.random((150, 2))
    # the same empirical measure three ways: a copy, a permutation, every atom twice
    for y in (x.copy(), x[rng.permutation(150)], np.concatenate([x, x])):
        assert w1_exact(x, y).value == pytest.approx(0.0, abs=TOL)
        assert w1_tree_upper(x, y) == 0.0
        assert w1_sliced_lower(x, y) == pytest.approx(0.0, abs=TOL)


def test_tree_hand_computed() -> None:
    # (0.1, 0.1) and (0.4, 0.2) share the cells of levels 0..2 (x split at 0.5, y at 0.5)
    # and part at level 3 (x split at 0.25): d_T = D_2 = 2^-1
    assert w1_tree_upper([[0.1, 0.1]], [[0.4, 0.2]]) == 0.5
    assert w1_tree_upper([[0.1, 0.1]], [[0.4, 0.2]], metric="euclidean") == pytest.approx(
        math.hypot(0.5, 0.5)
    )
    # the shared atom stays (leaf term 0); mass 1/2 moves (0.9, 0.9) → (0.2, 0.2), whose
    # deepest common cell is the root: tree = 1/2 · D_0, exact = 1/2 · 0.7
    x, y = [[0.1, 0.1], [0.9, 0.9]], [[0.1, 0.1], [0.2, 0.2]]
    assert w1_tree_upper(x, y) == 0.5
    assert w1_exact(x, y).value == pytest.approx(0.35)


def test_tree_bound_of_two_cell_split() -> None:
    # x at (0.1, 0.1), y at (0.9, 0.9): disjoint from level 1 on, d_T = D_0 = 1 ≥ 0.8
    assert w1_tree_upper([[0.1, 0.1]], [[0.9, 0.9]]) == 1.0


def test_tree_is_non_increasing_in_depth() -> None:
    rng = np.random.default_rng(8)
    x, y = rng.random((300, 2)), rng.random((200, 2))
    values = [w1_tree_upper(x, y, depth=r) for r in range(0, 31)]
    assert all(a >= b - TOL for a, b in zip(values, values[1:], strict=False))
    assert values[0] == 1.0  # depth 0: every distinct pair costs D_0 = 1, no atom shared


def test_tree_diameters_match_tree_module() -> None:
    for d in (1, 2, 3):
        diam = level_diameters(12, d)
        assert diam.tolist() == [cell_diameter(j, d) for j in range(13)]
        euclid = level_diameters(12, d, metric="euclidean")
        assert np.all(np.diff(euclid) <= 0) and np.all(euclid >= diam)
    assert default_tree_depth(2000, 10, 2) == 13
    assert default_tree_depth(10**30, 1, 3) == 60


def test_tree_rejects_points_outside_unit_cube() -> None:
    with pytest.raises(ValueError, match=r"\[0,1\]"):
        w1_tree_upper([[1.5, 0.0]], [[0.0, 0.0]])


def test_tree_is_reasonably_tight_on_uniform() -> None:
    # accuracy-study §1.3: loose by about 3.5× on uniform data
    rng = np.random.default_rng(9)
    x, y = rng.random((2000, 2)), rng.random((2000, 2))
    exact = w1_exact(x, y).value
    upper = w1_tree_upper(x, y)
    lower = w1_sliced_lower(x, y)
    assert lower <= exact <= upper <= 5 * exact
    assert lower >= exact / 3


def test_sliced_mean_below_max_and_seeded() -> None:
    rng = np.random.default_rng(10)
    x, y = rng.random((120, 3)), rng.random((90, 3)) ** 1.5
    best = w1_sliced_lower(x, y, seed=4)
    assert w1_sliced_lower(x, y, seed=4, reduce="mean") <= best
    assert best == w1_sliced_lower(x, y, seed=4)


def _w1_1d_reference(xs: np.ndarray, ys: np.ndarray) -> float:
    """Exact 1-D W1 of two samples, ∫_0^1 |F^-1(t) − G^-1(t)| dt over the quantile steps."""
    xs, ys = np.sort(xs), np.sort(ys)
    n, m = xs.size, ys.size
    cuts = np.union1d(np.arange(n + 1) * m, np.arange(m + 1) * n)
    a, lengths = cuts[:-1], np.diff(cuts) / (n * m)
    return float(lengths @ np.abs(xs[a // m] - ys[a // n]))


def test_sliced_bound_equals_the_best_exact_projection() -> None:
    """POT's sliced distance with our directions equals an independent quantile computation."""
    from dpsynth.eval.sliced import _projections

    rng = np.random.default_rng(11)
    x, y = rng.random((50, 2)), rng.random((70, 2)) ** 2
    theta = _projections(2, 30, "chebyshev", 0)
    per_direction = [_w1_1d_reference(x @ t, y @ t) for t in theta.T]
    assert w1_sliced_lower(x, y, n_projections=30) == pytest.approx(max(per_direction), abs=TOL)
    assert w1_sliced_lower(x, y, n_projections=30, reduce="mean") == pytest.approx(
        float(np.mean(per_direction)), abs=TOL)


# --- i.i.d. floors ---------------------------------------------------------------------------


def _uniform2(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.random((n, 2))


def test_iid_floor_generated_uniform_matches_reference() -> None:
    # reference-numbers §4.1: ℓ2 floor of U[0,1]² at n = 1000 is 0.033; over 30 seeds we
    # measured mean 0.035, sd 0.004 for one pair, so a 2-pair mean lies in [0.025, 0.045]
    l2 = iid_floor_generated(_uniform2, 1000, seed=0, metric="euclidean", repeats=2)
    linf = iid_floor_generated(_uniform2, 1000, seed=0, repeats=2)
    assert 0.025 <= l2 <= 0.045
    assert 0.02 <= linf <= l2  # same samples; ‖·‖∞ ≤ ‖·‖2


def test_iid_floor_generated_guards_size() -> None:
    with pytest.raises(ValueError, match="max_points"):
        iid_floor_generated(_uniform2, 60, max_points=50)


def test_iid_floor_split_halves() -> None:
    x = np.random.default_rng(12).random((400, 2))
    value = iid_floor(x, seed=1)
    assert 0.0 < value < 0.2
    assert value == iid_floor(x, seed=1)
    assert iid_floor(np.repeat(x[:1], 10, axis=0)) == pytest.approx(0.0, abs=TOL)
    with pytest.raises(ValueError, match="len"):
        iid_floor(x, n=201)


# --- range queries --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(BOX_SIDES))
def test_random_boxes_lie_in_cube_with_kind_sides(kind: str) -> None:
    boxes = random_boxes(3, 500, kind=kind, seed=2)
    low, high = BOX_SIDES[kind]
    sides = boxes[:, 1] - boxes[:, 0]
    assert boxes.shape == (500, 2, 3)
    assert np.all(boxes[:, 0] >= 0) and np.all(boxes[:, 1] <= 1)
    assert np.all(sides >= low - TOL) and np.all(sides <= high + TOL)
    assert np.array_equal(boxes, random_boxes(3, 500, kind=kind, seed=2))


def test_random_boxes_rejects_unknown_kind() -> None:
    with pytest.raises(ValueError, match="kind"):
        random_boxes(2, 3, kind="huge")


def _brute_force_counts(points: np.ndarray, boxes: np.ndarray) -> list[int]:
    out = []
    for lo, hi in boxes:
        out.append(sum(all(lo[i] <= p[i] <= hi[i] for i in range(len(p))) for p in points))
    return out


def test_range_counts_match_brute_force(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(13)
    points = np.concatenate([rng.random((300, 2)), rng.integers(0, 5, (40, 2)) / 4.0])
    boxes = np.concatenate(
        [random_boxes(2, 30, kind=k, seed=i) for i, k in enumerate(sorted(BOX_SIDES))]
        + [np.array([[[0.25, 0.25], [0.5, 0.75]]])]  # corners exactly on grid points: closed
    )
    expected = _brute_force_counts(points, boxes)
    assert range_counts(points, boxes).tolist() == expected
    monkeypatch.setattr(queries_module, "_BLOCK_ELEMENTS", 64)  # many point and box blocks
    monkeypatch.setattr(queries_module, "_BOXES_PER_BLOCK", 5)
    assert range_counts(points, boxes).tolist() == expected
    assert range_counts(np.zeros((0, 2)), boxes).tolist() == [0] * len(boxes)


def test_relative_error_zero_for_identical_and_rescaled_sets() -> None:
    rng = np.random.default_rng(14)
    x = rng.random((500, 2))
    boxes = random_boxes(2, 100, kind="small", seed=3)
    assert np.all(relative_range_error(x, x.copy(), boxes) == 0.0)
    # a synthetic set of twice the size with the same fractions scores 0 after rescaling
    assert np.all(relative_range_error(x, np.concatenate([x, x]), boxes) == 0.0)


def test_relative_error_hand_computed() -> None:
    x = np.array([[0.1, 0.1]] * 3 + [[0.9, 0.9]] * 997)  # n = 1000
    boxes = np.array([[[0.0, 0.0], [0.5, 0.5]], [[0.4, 0.4], [0.6, 0.6]]])
    synth = np.array([[0.9, 0.9]] * 498 + [[0.1, 0.1]] * 2)  # m = 500, rescale by 2
    err = relative_range_error(x, synth, boxes)
    # box 0: q = 3, q̂ = 4 → 1/3; box 1: q = 0, q̂ = 0 → 0 (denominator 0.001·n = 1)
    assert err.tolist() == pytest.approx([1 / 3, 0.0])
    # an empty release answers 0 everywhere; the smoothing floor caps the error at q / 1
    assert relative_range_error(x, np.zeros((0, 2)), boxes).tolist() == [1.0, 0.0]
