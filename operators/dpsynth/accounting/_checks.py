"""Argument checks and number formatting shared by the accounting modules (messages name the fix).

Layer: core.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

from dpsynth.errors import ConfigError

#: Relative slack of the budget check, for floating-point rounding of the sums only.
_BUDGET_RTOL = 1e-12


def _show(value: object) -> str:
    """Render a parameter value for an error message (plain numbers, no numpy reprs)."""
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, Integral):
        return str(int(value))
    if isinstance(value, Real):
        return repr(float(value))
    return repr(value)


def _check_d(d: object) -> int:
    if isinstance(d, bool) or not isinstance(d, Integral) or int(d) < 1:
        raise ConfigError(
            f"`d` ({_show(d)}) must be an integer >= 1; pass the dimension of the data domain"
        )
    return int(d)


def _check_epsilon(epsilon: object) -> float:
    if (isinstance(epsilon, bool) or not isinstance(epsilon, Real)
            or not (math.isfinite(float(epsilon)) and float(epsilon) > 0)):
        raise ConfigError(
            f"`epsilon` ({_show(epsilon)}) must be a finite number > 0; "
            "pass the total privacy budget of the release, e.g. 1.0"
        )
    return float(epsilon)


def _check_level(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < minimum:
        raise ConfigError(f"`{name}` ({_show(value)}) must be an integer >= {minimum}")
    return int(value)


def _fmt_pair(x: float, y: float) -> tuple[str, str]:
    """Format two numbers briefly, with enough digits that unequal numbers look unequal."""
    a, b = f"{x:.6g}", f"{y:.6g}"
    if a == b and x != y:
        a, b = repr(x), repr(y)
    return a, b
