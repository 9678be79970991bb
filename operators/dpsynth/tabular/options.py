"""The tabular synthesizer's options and their checks (one place, errors that name the fix).

Layer: core. :func:`check_options` refuses what :class:`~dpsynth.tabular.synthesizer.
TabularSynthesizer` cannot run, including the variants that would use a private count under
add/remove neighbours (docs/privacy.md P12).
"""

from __future__ import annotations

from typing import Any

from dpsynth.errors import ConfigError
from dpsynth.params import PARAMS, check_library
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.model import RULES

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


def check_options(domain: Domain, **options: Any) -> None:
    """Raise :class:`ConfigError` for any option the synthesizer refuses (names the fix)."""
    if not isinstance(domain, Domain):
        raise ConfigError("domain must be a dpsynth.tabular.Domain (Domain.from_json_file)")
    check_library({"mechanism": "tabular_mechanism", "counter": "tabular_counter",
                   "workloads_per_step": "tabular_workloads_per_step"},
                  **{name: options[name] for name in (
                      "mechanism", "counter", "fit", "neighbours", "estimator", "selection",
                      "release_every", "workloads_per_step", "partition")})
    choices = (("bias", BIASES), ("fit_rule", RULES), ("score", SCORES))
    for name, allowed in choices:
        if options[name] not in allowed:
            raise ConfigError(f"`{name}` ({options[name]!r}) must be one of {list(allowed)}")
    for name, low in (("fit_passes", 1), ("rejuvenate_every", 0), ("support_size", 1)):
        value = options[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"`{name}` ({value!r}) must be an integer >= {low}")
    if len(domain.sizes) < 2:
        raise ConfigError("the domain needs at least 2 attributes (2-way workloads)")
    if options["neighbours"] == "add_remove" and options["pooled_marginals"]:
        raise ConfigError(  # privacy: P12 (records fed to a counter are private)
            "pooled_marginals rescales counters by the records fed to them, which is public "
            "only under replacement: use neighbours='replace', or pooled_marginals=False")
    if options["fit"] == "pgm" and options["estimator"] != "alg3":
        raise ConfigError("fit='pgm' fits each step's measurements (estimator='alg3'); the "
                          "counter shares of estimator='sample' are fitted by MW: use "
                          "fit='mw', or estimator='alg3' with fit='pgm'")
    damping = options["damping"]
    if isinstance(damping, bool) or not isinstance(damping, int | float) or not (
            0.0 < damping <= 1.0):
        raise ConfigError(f"`damping` ({damping!r}) must lie in (0, 1]")
    share = options["size_share"]
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 < share < 1.0:
        raise ConfigError(f"`size_share` ({share!r}) must lie strictly in (0, 1)")


def refuse_users(users: Any) -> None:
    """The tabular engine protects records: ``users=`` (the privacy unit "user") is refused."""
    if users is not None:
        raise ConfigError("users= gives each record's user for the privacy unit 'user', which "
                          "the tabular synthesizer does not offer (it protects records): drop it")
