"""The tabular synthesizer's configuration: one typed object, validated once.

Layer: core (no pydantic, no click). :meth:`TabularConfig.resolve` is the one place where the
parameters of :class:`~dpsynth.tabular.synthesizer.TabularSynthesizer` are checked — the
declared ones against their :class:`~dpsynth.params.Param` (type, bounds, choices), the
library's own options against their rules — their combinations refused (the variants that
would use a private count under add/remove, docs/privacy.md P12) and the derived values
computed: k (``workloads_per_step``, by default max(1, round(2ε)), capped at the number of
workloads), the size counter's ε_n, the per-call budgets of each step and the checked
worst-case loss. Everything downstream (the synthesizer, its counters, its ledger) reads the
resolved object and checks nothing again. The parsers (``dpsynth tabular run``'s options, the
worker's ``DPSYNTH_*`` settings) only read text into values and hand them to
:meth:`~TabularConfig.resolve`. The tabular engine protects records: there is no privacy unit
"user", so one record's ε is ε.

>>> from dpsynth.tabular.domain import Domain
>>> config = TabularConfig.resolve(Domain.from_dict({"a": 2, "b": 3, "c": 2}), 1.0, 10)
>>> config.neighbours, config.workloads_per_step, config.k, config.eps_size
('add_remove', 2, 2, 0.1)
>>> config.eps_select, config.eps_measure, config.worst_case_loss
(0.0, 0.45, 1.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpsynth.accounting.composition import select_measure_loss, split_budget
from dpsynth.errors import ConfigError
from dpsynth.params import PARAMS
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.model import RULES
from dpsynth.tabular.options import BIASES, SCORES, default_workloads_per_step
from dpsynth.tabular.size import SIZE_SHARE
from dpsynth.tabular.workloads import Workloads

__all__ = ["TabularConfig"]

#: The declared parameters :meth:`TabularConfig.resolve` checks, in the order of its checks:
#: the library's keyword → its declaration (:data:`dpsynth.params.PARAMS`).
DECLARED = {"mechanism": "tabular_mechanism", "counter": "tabular_counter", "fit": "fit",
            "neighbours": "neighbours", "estimator": "estimator", "selection": "selection",
            "release_every": "release_every", "workloads_per_step": "tabular_workloads_per_step",
            "partition": "partition"}


def _checked(keyword: str, value: Any) -> Any:
    """``value`` by its declaration's rule (:meth:`~dpsynth.params.Param.check`), the error
    naming the library's keyword."""
    return PARAMS[DECLARED.get(keyword, keyword)].check(value, keyword)


@dataclass(frozen=True)
class TabularConfig:
    """The resolved parameters of one :class:`~dpsynth.tabular.TabularSynthesizer` (no key).

    Build it with :meth:`resolve` (the constructor checks nothing). The first fields are the
    synthesizer's arguments, checked (``workloads_per_step`` resolved from ε when unset); the
    last are derived: ``k`` (the workloads measured per step), ``eps_size`` (ε_n of the size
    counter, 0 under replacement), ``eps_select`` and ``eps_measure`` (the budget of one EM
    selection, 0 for the public cyclic schedule, and of one counter input) and
    ``worst_case_loss`` (ε_n + k·(ε_select + ε_measure), checked ≤ ε; P1, P12).
    """

    domain: Domain
    epsilon: float
    release_every: int
    mechanism: str
    counter: str
    workloads_per_step: int
    selection: str
    fit: str
    neighbours: str
    bias: str
    block_size: int
    support_size: int
    full_domain_limit: int
    fit_passes: int
    fit_rule: str
    rejuvenate_every: int
    estimator: str
    damping: float
    score: str
    pooled_marginals: bool
    partition: int
    size_share: float
    k: int
    eps_size: float
    eps_select: float
    eps_measure: float
    worst_case_loss: float

    @classmethod
    def resolve(
        cls,
        domain: Domain,
        epsilon: float,
        release_every: int,
        *,
        mechanism: str = "proposed",
        counter: str = "simple",
        workloads_per_step: int | None = None,
        selection: str = "cyclic",
        fit: str = "mw",
        neighbours: str = "add_remove",
        bias: str = "none",
        block_size: int = 8,
        support_size: int = 8192,
        full_domain_limit: int = 1 << 16,
        fit_passes: int = 2,
        fit_rule: str = "ratio",
        rejuvenate_every: int = 5,
        estimator: str = "sample",
        damping: float = 0.5,
        score: str = "mean",
        pooled_marginals: bool = False,
        partition: int = 0,
        size_share: float = SIZE_SHARE,
    ) -> TabularConfig:
        """Check every argument once, refuse unsound combinations, resolve k and the step
        budgets: :class:`~dpsynth.errors.ConfigError` naming the first argument (or
        combination) refused, and its fix. The arguments are the synthesizer's (same names,
        same defaults)."""
        epsilon = _checked("epsilon", epsilon)  # the one check of ε
        if workloads_per_step is None:  # k = max(1, round(2ε)): the measured default (T3)
            workloads_per_step = default_workloads_per_step(epsilon)
        if not isinstance(domain, Domain):
            raise ConfigError("domain must be a dpsynth.tabular.Domain (Domain.from_json_file)")
        mechanism = _checked("mechanism", mechanism)
        counter = _checked("counter", counter)
        fit = _checked("fit", fit)
        neighbours = _checked("neighbours", neighbours)
        estimator = _checked("estimator", estimator)
        selection = _checked("selection", selection)
        release_every = _checked("release_every", release_every)
        workloads_per_step = _checked("workloads_per_step", workloads_per_step)
        partition = _checked("partition", partition)
        for name, choice, allowed in (("bias", bias, BIASES), ("fit_rule", fit_rule, RULES),
                                      ("score", score, SCORES)):
            if choice not in allowed:
                raise ConfigError(f"`{name}` ({choice!r}) must be one of {list(allowed)}")
        for name, number, low in (("fit_passes", fit_passes, 1),
                                  ("rejuvenate_every", rejuvenate_every, 0),
                                  ("support_size", support_size, 1)):
            if isinstance(number, bool) or not isinstance(number, int) or number < low:
                raise ConfigError(f"`{name}` ({number!r}) must be an integer >= {low}")
        if len(domain.sizes) < 2:
            raise ConfigError("the domain needs at least 2 attributes (2-way workloads)")
        if neighbours == "add_remove" and pooled_marginals:
            raise ConfigError(  # privacy: P12 (records fed to a counter are private)
                "pooled_marginals rescales counters by the records fed to them, which is "
                "public only under replacement: use neighbours='replace', or "
                "pooled_marginals=False")
        if fit == "pgm" and estimator != "alg3":
            raise ConfigError("fit='pgm' fits each step's measurements (estimator='alg3'); the "
                              "counter shares of estimator='sample' are fitted by MW: use "
                              "fit='mw', or estimator='alg3' with fit='pgm'")
        if isinstance(damping, bool) or not isinstance(damping, int | float) or not (
                0.0 < damping <= 1.0):
            raise ConfigError(f"`damping` ({damping!r}) must lie in (0, 1]")
        if (isinstance(size_share, bool) or not isinstance(size_share, int | float)
                or not 0.0 < size_share < 1.0):
            raise ConfigError(f"`size_share` ({size_share!r}) must lie strictly in (0, 1)")
        k = min(workloads_per_step, len(Workloads(domain.sizes)))
        # the count is public under replacement; under add/remove a size counter spends ε_n
        eps_size = float(size_share) * epsilon if neighbours == "add_remove" else 0.0
        public = mechanism == "proposed" and selection == "cyclic"  # reads no data: T18
        eps_select, eps_measure = split_budget(epsilon, k, eps_size,
                                               0.0 if public else 0.5)
        loss = select_measure_loss(  # privacy: P1 (issue 7), P12
            epsilon, k, eps_select, eps_measure, eps_size)
        return cls(domain, epsilon, release_every, mechanism, counter, workloads_per_step,
                   selection, fit, neighbours, bias, int(block_size), support_size,
                   int(full_domain_limit), fit_passes, fit_rule, rejuvenate_every, estimator,
                   float(damping), score, bool(pooled_marginals), partition, float(size_share),
                   k, eps_size, eps_select, eps_measure, loss)

    def public_config(self) -> dict[str, Any]:
        """Everything a synthesizer's state is bound to (no secrets): restore needs the same.
        The keys and their order are those of every snapshot written (``method`` is the
        mechanism; ``size_share`` only under add/remove)."""
        extra = {"size_share": self.size_share} if self.neighbours == "add_remove" else {}
        return {
            **extra,
            "domain": self.domain.to_dict(), "epsilon": self.epsilon,
            "release_every": self.release_every, "method": self.mechanism,
            "counter": self.counter, "workloads_per_step": self.workloads_per_step,
            "fit": self.fit, "neighbours": self.neighbours, "bias": self.bias,
            "block_size": self.block_size, "support_size": self.support_size,
            "full_domain_limit": self.full_domain_limit, "fit_passes": self.fit_passes,
            "fit_rule": self.fit_rule, "rejuvenate_every": self.rejuvenate_every,
            "estimator": self.estimator, "score": self.score,
            "selection": self.selection, "damping": self.damping,
            "pooled_marginals": self.pooled_marginals, "partition": self.partition,
        }
