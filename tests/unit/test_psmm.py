"""PSMM (diss. Alg 1) and the corrected d_BL LP (Alg 2): optimality, privacy, determinism."""

from __future__ import annotations

from itertools import combinations, product

import numpy as np
import pytest

from dpsynth.accounting import check_composition, laplace_loss
from dpsynth.errors import BudgetExceededError, ConfigError
from dpsynth.offline.psmm import (
    closest_probability_dense,
    closest_probability_grid,
    grid_of_cells,
    psmm_measure,
    psmm_side_bits,
    psmm_synthesize,
    round_measure,
)

KEY = bytes(range(32))


def f_vertices(dist: np.ndarray, bound: float = 1.0) -> np.ndarray:
    """Vertices of {f : f_i − f_j ≤ D_ij (i ≠ j), |f_i| ≤ B}: each solves m active constraints.

    Independent of any LP solver; d_BL(τ, ν) = max over these vertices of Σ (ν_i − τ_i) f_i.
    """
    m = dist.shape[0]
    rows, rhs = [], []
    for i, j in product(range(m), repeat=2):
        if i != j:
            row = np.zeros(m)
            row[i], row[j] = 1.0, -1.0
            rows.append(row)
            rhs.append(dist[i, j])
    for i in range(m):
        for sign in (1.0, -1.0):
            row = np.zeros(m)
            row[i] = sign
            rows.append(row)
            rhs.append(bound)
    a, b = np.array(rows), np.array(rhs)
    vertices = []
    for active in combinations(range(len(a)), m):
        sub = a[list(active)]
        if abs(np.linalg.det(sub)) < 1e-12:
            continue
        f = np.linalg.solve(sub, b[list(active)])
        if (a @ f <= b + 1e-9).all():
            vertices.append(f)
    return np.array(vertices)


def simplex_grid(m: int, steps: int) -> np.ndarray:
    pts = [np.array(c) / steps for c in product(range(steps + 1), repeat=m - 1)
           if sum(c) <= steps]
    return np.array([np.append(p, 1.0 - p.sum()) for p in pts])


@pytest.mark.parametrize("seed", range(6))
def test_lp_optimum_matches_brute_force_on_tiny_instances(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = 2 + seed % 2
    y = rng.random((m, 2))
    dist = np.abs(y[:, None, :] - y[None, :, :]).max(axis=2)
    nu = rng.normal(1.0 / m, 0.4, m)
    sol = closest_probability_dense(nu, dist)
    # the LP's τ is a probability measure whose d_BL to ν (by vertex enumeration) is its value
    assert sol.tau.min() >= 0 and sol.tau.sum() == pytest.approx(1.0)
    vertices = f_vertices(dist)
    assert float((vertices @ (nu - sol.tau)).max()) == pytest.approx(sol.distance, abs=1e-7)
    # and no probability measure on a fine simplex grid does better; the grid's best is within
    # (Lipschitz bound B = 1) × (ℓ1 grid spacing) of it
    steps = 60
    grid_best = float((((nu - simplex_grid(m, steps)) @ vertices.T).max(axis=1)).min())
    assert sol.distance <= grid_best + 1e-7
    assert grid_best <= sol.distance + 2.0 * (m - 1) / steps


def test_printed_lp_without_coupling_is_not_the_closest_measure() -> None:
    """The erratum is real: without w_ji the printed LP undercounts the transport cost."""
    from scipy.optimize import linprog

    dist = np.array([[0.0, 1.0], [1.0, 0.0]])
    nu = np.array([1.5, 0.5])
    # printed Alg 2: vars u12, u21, u'12, u'21, v1, v2, τ1, τ2
    c = [1, 1, 1, 1, 2, 2, 0, 0]
    a_ub = -np.array([[1, 0, -1, 0, 1, 0, 1, 0], [0, 1, 0, -1, 0, 1, 0, 1]])
    printed = linprog(c, A_ub=a_ub, b_ub=-nu, A_eq=[[0] * 6 + [1, 1]], b_eq=[1],
                      method="highs")
    corrected = closest_probability_dense(nu, dist)
    assert printed.status == 0
    # mass 2 must lose 1 unit: only v can remove mass (cost 2B = 2); the printed LP "moves" it
    # to node 2 (u12) and from node 2 to node 1 (u21) without either node absorbing it: cost 1
    assert corrected.objective == pytest.approx(2.0)
    assert printed.fun == pytest.approx(1.0)


@pytest.mark.parametrize(("d", "k"), [(1, 3), (2, 2), (3, 1)])
def test_sparse_king_graph_lp_equals_dense_lp(d: int, k: int) -> None:
    rng = np.random.default_rng(d)
    m = 1 << (d * k)
    centres = (grid_of_cells(k, d) + 0.5) / (1 << k)
    dist = np.abs(centres[:, None, :] - centres[None, :, :]).max(axis=2)
    for _ in range(3):
        nu = rng.normal(1.0 / m, 1.5 / m, m)
        sparse_sol = closest_probability_grid(nu, k, d)
        dense_sol = closest_probability_dense(nu, dist)
        assert sparse_sol.objective == pytest.approx(dense_sol.objective, abs=1e-9)
        assert sparse_sol.variables < dense_sol.variables or d == 3


def test_grid_of_cells_matches_the_tree_partition() -> None:
    grid = grid_of_cells(2, 2)
    assert sorted(map(tuple, grid.tolist())) == [(i, j) for i in range(4) for j in range(4)]
    # Morton: cell 1 at depth 4 is x in [0, .25), y in [.25, .5)
    assert grid[1].tolist() == [0, 1]


def test_round_measure_sums_exactly() -> None:
    tau = np.random.default_rng(0).dirichlet(np.ones(50))
    counts = round_measure(tau, 997)
    assert counts.sum() == 997 and counts.min() >= 0
    assert np.abs(counts - tau * 997).max() < 1.0


def test_psmm_output_is_a_probability_measure_and_points_in_cells() -> None:
    x = np.random.default_rng(1).beta(2, 5, (1000, 2))
    res = psmm_measure(x, 1.0, KEY)
    assert res.lp.tau.min() >= 0 and res.lp.tau.sum() == pytest.approx(1.0)
    assert res.leaf_counts.sum() == res.metadata["n_out"] == len(res.points)
    assert res.metadata["cells"] == 1 << res.depth
    assert ((res.points > 0) & (res.points < 1)).all()
    # add/remove: n_out is the noisy total, not n; it is within a few noise s.d. of n
    assert abs(res.metadata["n_out"] - 1000) < 6 * np.sqrt(2 * res.metadata["cells"])


def test_same_key_same_output_other_key_differs() -> None:
    x = np.random.default_rng(2).random((800, 2))
    a = psmm_synthesize(x, 1.0, KEY)
    b = psmm_synthesize(x, 1.0, KEY)
    c = psmm_synthesize(x, 1.0, bytes(32))
    assert a.tobytes() == b.tobytes()
    assert a.shape != c.shape or a.tobytes() != c.tobytes()


def test_replace_doubles_the_noise_and_keeps_n() -> None:
    x = np.random.default_rng(3).random((500, 2))
    add = psmm_measure(x, 1.0, KEY, size_hint=500)
    rep = psmm_measure(x, 1.0, KEY, neighbours="replace")
    assert add.metadata["noise_scale"] == 1.0 and rep.metadata["noise_scale"] == 2.0
    private = psmm_measure(x, 1.0, KEY)  # no public size: 5 % of ε buys a noisy n for the grid
    assert private.metadata["noise_scale"] == pytest.approx(1 / 0.95)
    assert rep.metadata["n_out"] == 500
    assert rep.metadata["privacy_loss"] <= 1.0 and add.metadata["privacy_loss"] <= 1.0


def test_side_bits_follow_cor_3_7_and_the_cap() -> None:
    assert psmm_side_bits(4096, 1.0, 2) == 6  # 2^12 cells = εn
    assert psmm_side_bits(10**9, 1.0, 2) == 7  # capped at 2^14 cells
    assert psmm_side_bits(10, 0.1, 3) == 1


def test_bad_options_are_refused() -> None:
    x = np.random.default_rng(0).random((10, 2))
    with pytest.raises(ConfigError, match="neighbours"):
        psmm_measure(x, 1.0, KEY, neighbours="swap")
    with pytest.raises(ConfigError, match="epsilon"):
        psmm_measure(x, 0.0, KEY)
    with pytest.raises(ConfigError, match="max_cells"):
        psmm_measure(x, 1.0, KEY, side_bits=9)
    with pytest.raises(ConfigError, match="dense LP"):
        closest_probability_dense(np.zeros(2000), np.zeros((1, 1)))


def test_composition_check_refuses_overspending() -> None:
    assert laplace_loss([1.0, 2.0], [2.0, 4.0]) == pytest.approx(1.0)
    with pytest.raises(BudgetExceededError, match="part 'b'"):
        check_composition({"a": 0.4, "b": 0.7}, 1.0, name="test")
