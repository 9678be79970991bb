"""Unit tests of dpsynth.accounting: paper schedules, closed forms and the budget check (P1)."""

from __future__ import annotations

import math
import re

import pytest

from dpsynth.accounting import (
    MAX_LEVEL,
    Schedule,
    check_budget,
    closed_form_path_loss,
    paper_schedule,
    worst_case_loss,
)
from dpsynth.errors import BudgetExceededError, ConfigError

DIMS = range(1, 11)


def _derived(
    base: Schedule,
    level_epsilon,
    name: str = "derived",
    keep_tail: bool = False,
) -> Schedule:
    return Schedule(
        name=name,
        d=base.d,
        epsilon=base.epsilon,
        level_epsilon=level_epsilon,
        replays_history=base.replays_history,
        params=dict(base.params),
        tail_loss=base.tail_loss if keep_tail else None,
    )


# --- closed forms --------------------------------------------------------------------------------


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.7])
def test_path_loss_matches_closed_form(d: int, epsilon: float) -> None:
    sched = paper_schedule(d, epsilon)
    for s in range(41):
        expected = closed_form_path_loss(d, epsilon, s)
        assert sched.path_loss(s) == pytest.approx(expected, rel=1e-12, abs=0.0), (d, s)


@pytest.mark.parametrize("d", range(2, 11))
def test_closed_form_formula_d_at_least_2(d: int) -> None:
    alpha = 2 ** ((1 - 1 / d) / 2)
    for s in (0, 1, 5, 40):
        assert closed_form_path_loss(d, 2.0, s) == pytest.approx(1.0 * (1 - alpha**-s), rel=1e-14)
        assert closed_form_path_loss(d, 2.0, s) < 1.0


def test_closed_form_d1() -> None:
    assert closed_form_path_loss(1, 1.0, 0) == pytest.approx(0.5 - 3 / math.pi**2, rel=1e-15)
    assert closed_form_path_loss(1, 2.0, 17) == pytest.approx(2 * (0.5 - 3 / math.pi**2))


@pytest.mark.parametrize("d", range(2, 11))
def test_P1_worst_case_d_at_least_2_is_at_max_level(d: int) -> None:
    epsilon = 1.0
    alpha = 2 ** ((1 - 1 / d) / 2)
    loss, s = worst_case_loss(paper_schedule(d, epsilon))
    assert s == MAX_LEVEL
    assert loss == pytest.approx(2 * (epsilon / 2) * (1 - alpha**-MAX_LEVEL), rel=1e-12)
    assert loss < epsilon
    assert check_budget(paper_schedule(d, epsilon)) == loss


@pytest.mark.parametrize(
    ("d", "c1"), [(2, 0.07955), (3, 0.10315), (4, 0.11445), (5, 0.12107), (10, 0.13398)]
)
def test_c1_values(d: int, c1: float) -> None:
    sched = paper_schedule(d, 1.0)
    assert sched.params["C1"] == pytest.approx(c1, abs=5e-6)
    assert sched.params["alpha"] == pytest.approx(2 ** ((1 - 1 / d) / 2))
    # ε_{j,j} = C1·ε, and each later time level is α times cheaper.
    assert sched.level_epsilon(3, 3) == pytest.approx(c1 * 1.0, abs=5e-6)
    assert sched.level_epsilon(3, 4) == pytest.approx(
        sched.level_epsilon(3, 3) / sched.params["alpha"]
    )


def test_level_epsilon_d2_formula_and_inactive_before_own_level() -> None:
    eps = 0.8
    sched = paper_schedule(2, eps)
    c1 = (1 - 2**-0.25) / 2
    for j in range(1, 8):
        for r in range(12):
            expected = c1 * eps * 2 ** ((j - r) * 0.25) if r >= j else 0.0
            assert sched.level_epsilon(j, r) == pytest.approx(expected, rel=1e-14, abs=0.0)
    assert sched.replays_history is False
    assert sched.name == "paper"


def test_d1_level_epsilons() -> None:
    sched = paper_schedule(1, 1.0)
    expected = [0.07599, 0.03377, 0.01900, 0.01216, 0.00844]
    for j, e in enumerate(expected, start=1):
        for r in (0, j, 30):  # independent of the time level
            assert sched.level_epsilon(j, r) == pytest.approx(e, abs=5e-6)
            assert sched.level_epsilon(j, r) == pytest.approx(3 / (math.pi**2 * (j + 1) ** 2))
    assert sched.replays_history is True


def test_P1_d1_total_is_erratum_value_not_epsilon() -> None:
    epsilon = 1.5
    loss, _ = worst_case_loss(paper_schedule(1, epsilon))
    assert loss == pytest.approx((1 - 6 / math.pi**2) * epsilon, rel=1e-12)
    assert loss == pytest.approx(0.392 * epsilon, abs=1e-3 * epsilon)
    assert check_budget(paper_schedule(1, epsilon)) == loss


def test_d1_tail_bound_is_the_series_remainder() -> None:
    sched = paper_schedule(1, 1.0)
    # Σ_{j > m} 1/(j+1)², summed directly to 10^6 plus the integral bound of the rest.
    for m in (0, 3, 19, MAX_LEVEL):
        direct = math.fsum(1 / (j + 1) ** 2 for j in range(m + 1, 10**6)) + 1 / (10**6 + 0.5)
        assert sched.tail_loss(0, m) == pytest.approx(3 / math.pi**2 * direct, rel=1e-10)


def test_generic_replaying_schedule_sums_levels_1_to_max_level() -> None:
    base = paper_schedule(1, 1.0)
    generic = _derived(base, base.level_epsilon)  # no tail
    truncated = math.fsum(3 / (math.pi**2 * (j + 1) ** 2) for j in range(1, MAX_LEVEL + 1))
    assert generic.path_loss(9) == pytest.approx(truncated, rel=1e-14)
    assert generic.path_loss(9) < base.path_loss(9)
    assert generic.path_loss(9, max_level=3) == pytest.approx(
        3 / math.pi**2 * (1 / 4 + 1 / 9 + 1 / 16)
    )


def test_charged_levels() -> None:
    assert paper_schedule(3, 1.0).charged_levels(0) == range(1, 1)
    assert paper_schedule(3, 1.0).charged_levels(7) == range(1, 8)
    assert paper_schedule(3, 1.0).charged_levels(70) == range(1, MAX_LEVEL + 1)
    assert paper_schedule(3, 1.0).charged_levels(7, max_level=5) == range(1, 6)
    assert paper_schedule(1, 1.0).charged_levels(0) == range(1, MAX_LEVEL + 1)
    assert paper_schedule(1, 1.0).charged_levels(2, max_level=10) == range(1, 11)


# --- the budget check (P1) -----------------------------------------------------------------------


@pytest.mark.parametrize("d", range(2, 11))
def test_P1_scaled_paper_schedule_refused(d: int) -> None:
    base = paper_schedule(d, 1.0)
    inflated = _derived(base, lambda j, r: 1.01 * base.level_epsilon(j, r), name="inflated")
    with pytest.raises(BudgetExceededError) as info:
        check_budget(inflated)
    msg = str(info.value)
    assert "'inflated'" in msg
    assert f"s={MAX_LEVEL}" in msg  # the worst time level
    assert f"cell level j={MAX_LEVEL} " in msg  # ε_{j,s} is largest at j = s
    assert "epsilon=1 " in msg or "epsilon=1;" in msg
    assert isinstance(info.value, ConfigError)


def test_P1_scaled_d1_schedule_refused() -> None:
    base = paper_schedule(1, 1.0)
    inflated = _derived(base, lambda j, r: 2.6 * base.level_epsilon(j, r), name="x", keep_tail=True)
    with pytest.raises(BudgetExceededError, match=r"cell level j=1 contributes"):
        check_budget(inflated)
    # Just under: 2.5 × 0.392 ε < ε passes.
    ok = _derived(base, lambda j, r: 2.5 * base.level_epsilon(j, r), keep_tail=True)
    assert check_budget(ok) < 1.0


@pytest.mark.parametrize(("d", "level"), [(2, 7), (5, 3), (10, 40)])
def test_P1_single_inflated_level_refused_and_named(d: int, level: int) -> None:
    base = paper_schedule(d, 1.0)

    def eps(j: int, r: int) -> float:
        if j == level and r >= j:
            return 0.3
        return base.level_epsilon(j, r)

    with pytest.raises(BudgetExceededError) as info:
        check_budget(_derived(base, eps, name="one-hot"))
    msg = str(info.value)
    assert f"cell level j={level} contributes 0.3 per path" in msg
    m = re.search(r"spends ε=([0-9.e+-]+) .* at time level s=(\d+), above epsilon=1", msg)
    assert m is not None, msg
    loss, s = worst_case_loss(_derived(base, eps))
    assert float(m.group(1)) == pytest.approx(loss, rel=1e-5)
    assert int(m.group(2)) == s
    assert s >= level


def test_P1_single_inflated_level_d1_refused_and_named() -> None:
    base = paper_schedule(1, 1.0)

    def eps(j: int, r: int) -> float:
        return 0.35 if j == 5 else base.level_epsilon(j, r)

    with pytest.raises(BudgetExceededError, match=r"s=0, .*cell level j=5 contributes 0\.35"):
        check_budget(_derived(base, eps, keep_tail=True))


def test_P1_budget_edge_within_rounding_is_accepted_above_is_refused() -> None:
    base = paper_schedule(2, 1.0)
    worst, _ = worst_case_loss(base)
    exact = _derived(base, lambda j, r: base.level_epsilon(j, r) / worst)  # total == ε
    assert check_budget(exact) == pytest.approx(1.0, rel=1e-13)
    over = _derived(base, lambda j, r: base.level_epsilon(j, r) / worst * (1 + 1e-9))
    with pytest.raises(BudgetExceededError, match=r"above epsilon=1"):
        check_budget(over)


def test_P1_budget_only_counts_levels_that_charge_the_record() -> None:
    # A d ≥ 2 schedule without replay must not be charged for r < j; a replaying one must be.
    base = paper_schedule(2, 1.0)

    def eps(j: int, r: int) -> float:
        return 0.6 if r < j else base.level_epsilon(j, r)

    check_budget(_derived(base, eps))  # cells of level j do not run before time level j
    replaying = Schedule("replay", 2, 1.0, eps, replays_history=True)
    with pytest.raises(BudgetExceededError):
        check_budget(replaying)


@pytest.mark.parametrize("bad", [-1e-9, math.nan, math.inf, -math.inf, "0.1", None, True])
def test_P1_invalid_level_epsilon_refused_naming_cell(bad: object) -> None:
    base = paper_schedule(3, 1.0)

    def eps(j: int, r: int) -> float:
        return bad if (j, r) == (4, 6) else base.level_epsilon(j, r)  # type: ignore[return-value]

    sched = _derived(base, eps)
    with pytest.raises(ConfigError, match=r"\(j=4, r=6\)") as info:
        check_budget(sched)
    assert not isinstance(info.value, BudgetExceededError)
    with pytest.raises(ConfigError, match=r"\(j=4, r=6\)"):
        worst_case_loss(sched)


def test_P1_negative_level_cannot_offset_an_overspend() -> None:
    base = paper_schedule(1, 1.0)

    def eps(j: int, r: int) -> float:
        return {1: 0.9, 2: -0.9}.get(j, base.level_epsilon(j, r))

    with pytest.raises(ConfigError, match=r"\(j=2, r=0\)"):
        check_budget(_derived(base, eps))


# --- parameter validation ------------------------------------------------------------------------


@pytest.mark.parametrize("d", [0, -1, 1.5, 2.0, "2", True, None])
def test_invalid_d_refused(d: object) -> None:
    with pytest.raises(ConfigError, match=r"^`d` \(.*\) must be an integer >= 1"):
        paper_schedule(d, 1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("epsilon", [0, 0.0, -1.0, math.nan, math.inf, "1", None, True])
def test_invalid_epsilon_refused(epsilon: object) -> None:
    with pytest.raises(ConfigError, match=r"^`epsilon` \(.*\) must be a finite number > 0"):
        paper_schedule(2, epsilon)  # type: ignore[arg-type]


def test_epsilon_message_format() -> None:
    with pytest.raises(ConfigError, match=r"^`epsilon` \(-1\.0\) must be a finite number > 0"):
        paper_schedule(2, -1.0)
    with pytest.raises(ConfigError, match=r"^`d` \(0\) must be an integer >= 1"):
        closed_form_path_loss(0, 1.0, 3)
    with pytest.raises(ConfigError, match=r"^`epsilon` \(nan\)"):
        closed_form_path_loss(2, math.nan, 3)


def test_schedule_constructor_validates() -> None:
    with pytest.raises(ConfigError, match=r"`epsilon`"):
        Schedule("x", 2, -0.5, lambda j, r: 0.0, replays_history=False)
    with pytest.raises(ConfigError, match=r"`d`"):
        Schedule("x", 0, 1.0, lambda j, r: 0.0, replays_history=False)
    with pytest.raises(ConfigError, match=r"`level_epsilon`"):
        Schedule("x", 2, 1.0, 0.1, replays_history=False)  # type: ignore[arg-type]


def test_invalid_time_level_refused() -> None:
    with pytest.raises(ConfigError, match=r"`s` \(-1\)"):
        paper_schedule(2, 1.0).path_loss(-1)
    with pytest.raises(ConfigError, match=r"`s` \(-1\)"):
        closed_form_path_loss(2, 1.0, -1)


def test_schedule_is_frozen() -> None:
    sched = paper_schedule(2, 1.0)
    with pytest.raises(AttributeError):
        sched.epsilon = 2.0  # type: ignore[misc]


@pytest.mark.parametrize("bad", [-1e-3, math.nan, "0"])
def test_P1_invalid_tail_refused(bad: object) -> None:
    base = paper_schedule(1, 1.0)
    sched = Schedule("t", 1, 1.0, base.level_epsilon, True, tail_loss=lambda s, m: bad)
    with pytest.raises(ConfigError, match=r"`tail_loss` at \(s=0, max_level=64\)"):
        check_budget(sched)
