"""The tabular synthesizer's option values and defaults.

Layer: core. The allowed values of the options and the default k; the options are checked
once, by :meth:`~dpsynth.tabular.config.TabularConfig.resolve` (errors that name the fix),
including the variants that would use a private count under add/remove neighbours
(docs/privacy.md P12).
"""

from __future__ import annotations

from typing import Any

from dpsynth.errors import ConfigError
from dpsynth.params import PARAMS

METHODS = PARAMS["tabular_mechanism"].values
FITS = PARAMS["fit"].values
#: Sensitivity s of one neighbouring change of the differential stream ∇f.
NEIGHBOURS = {"add_remove": 1.0, "replace": 2.0}
BIASES = ("none", "paper", "scaled")
SCORES, ESTIMATORS = ("mean", "l1"), PARAMS["estimator"].values
#: Selection of the proposed method: the public cyclic schedule (default, T18) or the EM (paper).
SELECTIONS = PARAMS["selection"].values


def default_workloads_per_step(epsilon: float) -> int:
    """k, the workloads measured per step, when none is given: max(1, round(2ε)) (T3, T18).

    Each counter input then gets ε_meas = 0.9ε/k ≈ 0.45 under add/remove, and a larger ε buys
    coverage (every workload measured every ⌈W/k⌉ steps) instead of precision (the rule was
    chosen against the paper's tables: docs/benchmarks.md, "Tabular streams").

    >>> [default_workloads_per_step(e) for e in (0.25, 0.5, 1, 2, 4)]
    [1, 1, 2, 4, 8]
    """
    return max(1, round(2 * float(epsilon)))


def refuse_users(users: Any) -> None:
    """The tabular engine protects records: ``users=`` (the privacy unit "user") is refused."""
    if users is not None:
        raise ConfigError("users= gives each record's user for the privacy unit 'user', which "
                          "the tabular synthesizer does not offer (it protects records): drop it")
