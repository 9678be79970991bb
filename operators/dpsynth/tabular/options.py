"""The tabular synthesizer's options and their checks (one place, errors that name the fix).

Layer: core. :func:`check_options` refuses what :class:`~dpsynth.tabular.synthesizer.
TabularSynthesizer` cannot run, including the variants that would use a private count under
add/remove neighbours (docs/privacy.md P12).
"""

from __future__ import annotations

from typing import Any

from dpsynth.errors import ConfigError
from dpsynth.tabular.counters import COUNTERS
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.model import RULES

METHODS = ("proposed", "baseline")
FITS = ("mw", "pgm")
#: Sensitivity s of one neighbouring change of the differential stream ∇f.
NEIGHBOURS = {"add_remove": 1.0, "replace": 2.0}
BIASES = ("none", "paper", "scaled")
SCORES, ESTIMATORS = ("mean", "l1"), ("alg3", "sample")


def check_options(domain: Domain, **options: Any) -> None:
    """Raise :class:`ConfigError` for any option the synthesizer refuses (names the fix)."""
    if not isinstance(domain, Domain):
        raise ConfigError("domain must be a dpsynth.tabular.Domain (Domain.from_json_file)")
    choices = (("mechanism", METHODS), ("counter", COUNTERS), ("fit", FITS),
               ("neighbours", tuple(NEIGHBOURS)), ("bias", BIASES), ("fit_rule", RULES),
               ("score", SCORES), ("estimator", ESTIMATORS))
    for name, allowed in choices:
        if options[name] not in allowed:
            raise ConfigError(f"`{name}` ({options[name]!r}) must be one of {list(allowed)}")
    for name, low in (("release_every", 1), ("workloads_per_step", 1), ("fit_passes", 1),
                      ("rejuvenate_every", 0), ("support_size", 1), ("partition", 0)):
        value = options[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(f"`{name}` ({value!r}) must be an integer >= {low}")
    if len(domain.sizes) < 2:
        raise ConfigError("the domain needs at least 2 attributes (2-way workloads)")
    if options["neighbours"] == "add_remove" and (
            options["estimator"] == "sample" or options["pooled_marginals"]):
        raise ConfigError(  # privacy: P12 (records fed to a counter are private)
            "estimator='sample' and pooled_marginals rescale counters by the records fed "
            "to them, which is public only under replacement: use neighbours='replace', "
            "or the defaults (estimator='alg3', pooled_marginals=False)")
    share = options["size_share"]
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0.0 < share < 1.0:
        raise ConfigError(f"`size_share` ({share!r}) must lie strictly in (0, 1)")
