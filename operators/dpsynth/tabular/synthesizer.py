"""Synthetic tabular streams: select–measure–fit (paper 003 Alg 3) and StreamingMWEM (Alg 2).

Layer: core. Insertion-only stream over a declared finite domain, in public steps: ``add``
records, ``step()`` on a public clock (tick marker, time bucket, the paper's fixed batches);
``extend`` (a step every ``release_every`` records) under replacement only. A table has |f_t|
rows under replacement, a noisy count's under add/remove (:mod:`~dpsynth.tabular.size`).

``mechanism="proposed"`` (Alg 3, workload version §7.2): per step t, k = ``workloads_per_step``
rounds of (1) select an unselected 2-way workload — by default on the public cyclic schedule
(``selection="cyclic"``, no ε, docs/tabular.md T18), or as printed by the exponential mechanism
on ``e_i = ‖q_i(∇f_t + g_{t−1}) − q_i(h_{t,l−1})‖₁/|q_i| − bias_i`` (Δ = s/min|q_i|,
``selection="em"``); (2) feed q_j(∇f_t) to workload j's counter; (3) fit. Default
(``estimator="sample"``, T6): every counter's share C_i/ΣC_i, times the noisy size, replayed by
damped MW from g_{t−1} (:mod:`~dpsynth.tabular.shares`). As printed (``estimator="alg3"``):
``m_j = C_j(t) + r_j``, MW from ``h_{t,l−1}`` to this step's measurements, ``g_t = avg_l h_{t,l}``
and ``r_i = q_i(g_t) − C_i(t)`` for every unselected i (Alg 3 lines 17–19).
``mechanism="baseline"`` (Alg 2): the same loop on ∇f_t alone with Lap(2k·s/ε) measurements, and
``g_t = g_{t−1} + avg_l h_{t,l}``.

Privacy: ε-DP for the whole stream under the paper's neighbours (one record added or removed
at one step; ``neighbours="replace"`` doubles every sensitivity s). Under add/remove a size
counter spends ε_n = ``size_share``·ε; each step (ε − ε_n)/k per counter (cyclic selection), or
(ε − ε_n)/(2k) per EM selection and per counter
(:func:`dpsynth.accounting.select_measure_split`), checked once with every other parameter by
:meth:`TabularConfig.resolve <dpsynth.tabular.config.TabularConfig.resolve>` and charged on a
:class:`~dpsynth.accounting.StepLedger` (docs/privacy.md P12). All noise is derived from ``key``.

Snapshots hold true pending records and counts (state, never released: it needs the protection
of the raw input), no key material, and bind the public configuration. One written before issue
17 (no ``selection`` in it) ran the exponential-mechanism selection, so it is restored with
``selection="em"``, and its ``estimator="sample"`` (which rescaled counters by the records fed)
is refused: start a new run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsynth.accounting import StepLedger
from dpsynth.contract import refuse_count_steps, tick_ends_step
from dpsynth.errors import StateCorruptError
from dpsynth.noise import KeyedNoise
from dpsynth.release import TabularRelease
from dpsynth.state import pack_state, unpack_state
from dpsynth.tabular.config import TabularConfig
from dpsynth.tabular.counters import Counter
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.estimators import pooled_marginals
from dpsynth.tabular.model import ParticleModel
from dpsynth.tabular.options import FITS, METHODS, NEIGHBOURS, refuse_users
from dpsynth.tabular.pgm import require_mbi, step_fit
from dpsynth.tabular.selection import (
    cyclic_order,
    cyclic_pick,
    exponential_mechanism,
    workload_scores,
)
from dpsynth.tabular.shares import fit_shares, guide_tables
from dpsynth.tabular.size import SIZE_SHARE, StreamSize
from dpsynth.tabular.workloads import Workloads

__all__ = ["FITS", "METHODS", "TabularSynthesizer"]
#: Rejuvenation guides: counter cells less this many noise standard deviations (T4).
GUIDE_FLOOR = 1.0
SNAPSHOT_KIND = "dpsynth.tabular.v1"


class TabularSynthesizer:
    """Continual ε-DP synthetic tables whose 2-way marginals track an insertion-only stream.

    Parameters
    ----------
    domain, epsilon, key
        Declared domain, total ε for the whole stream, secret noise key (≥ 16 bytes).
    release_every
        :meth:`extend` (replacement only): a step (and a release) every this many records.
    mechanism, counter
        ``"proposed"`` (Alg 3) or ``"baseline"`` (Alg 2); counter of Alg 3: ``"simple"``,
        ``"block"`` (fixed ``block_size``) or ``"unbounded_block"`` (Alg 4).
    workloads_per_step
        k, workloads measured per step (capped at the number of workloads); default
        max(1, round(2ε)) (:func:`~dpsynth.tabular.options.default_workloads_per_step`).
    selection
        ``"cyclic"`` (public schedule, spends no ε; T18) or ``"em"`` (exponential mechanism on
        half of the step's budget, as printed).
    estimator, damping
        ``"sample"`` (counter shares, damped replay; T6) or ``"alg3"`` (Alg 3's m and r).
    fit
        ``"mw"`` (multiplicative weights, :mod:`dpsynth.tabular.model`) or ``"pgm"`` (a
        graphical model by private-pgm, :mod:`dpsynth.tabular.pgm`; optional extra).
    neighbours
        ``"add_remove"`` (paper; the count is private: steps from :meth:`step` only, noisy
        sizes) or ``"replace"`` (the count is public, every sensitivity doubled).
    size_share
        add/remove: share ε_n/ε of the noisy size counter (default 0.1, docs/tabular.md T17).
    bias
        Selection bias term: ``"none"`` (default), ``"paper"`` (−|X_cols| as printed) or
        ``"scaled"`` (−1, a no-op under EM).
    block_size
        B of the bounded ``"block"`` counter.
    support_size, full_domain_limit, fit_passes, fit_rule, rejuvenate_every
        The MW model (:mod:`dpsynth.tabular.model`; docs/tabular.md T4).
    score, pooled_marginals
        Measured variants of the EM score and the fit (docs/tabular.md T9, T16).
    partition
        Input partition served; enters every noise context.

    The arguments are checked once, into a :class:`~dpsynth.tabular.config.TabularConfig`
    (``synth.config``); :meth:`from_config` builds the synthesizer of a resolved one.

    >>> dom = Domain.from_dict({"a": 2, "b": 3, "c": 2})
    >>> synth = TabularSynthesizer(dom, 1.0, bytes(32), release_every=10, neighbours="replace")
    >>> rel = synth.extend(np.zeros((25, 3), np.int64))
    >>> [r.step for r in rel], rel[-1].records.shape, synth.records_seen
    ([1, 2], (20, 3), 25)
    >>> private = TabularSynthesizer(dom, 1.0, bytes(32), release_every=10)
    >>> private.add(np.zeros((25, 3), np.int64)); release = private.step()
    >>> release.step, "records_seen" in release.metadata
    (1, False)
    """

    def __init__(
        self,
        domain: Domain,
        epsilon: float,
        key: bytes,
        *,
        release_every: int,
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
    ) -> None:
        self._setup(TabularConfig.resolve(
            domain, epsilon, release_every, mechanism=mechanism, counter=counter,
            workloads_per_step=workloads_per_step, selection=selection, fit=fit,
            neighbours=neighbours, bias=bias, block_size=block_size, support_size=support_size,
            full_domain_limit=full_domain_limit, fit_passes=fit_passes, fit_rule=fit_rule,
            rejuvenate_every=rejuvenate_every, estimator=estimator, damping=damping,
            score=score, pooled_marginals=pooled_marginals, partition=partition,
            size_share=size_share), key)

    @classmethod
    def from_config(cls, config: TabularConfig, key: bytes) -> TabularSynthesizer:
        """The synthesizer of a resolved :class:`~dpsynth.tabular.config.TabularConfig` (what
        ``dpsynth tabular run`` and the worker build; the keyword constructor builds one too)."""
        self = cls.__new__(cls)
        self._setup(config, key)
        return self

    def _setup(self, config: TabularConfig, key: bytes) -> None:
        """Build from ``config`` (checked once, by :meth:`TabularConfig.resolve`)."""
        self.config = config
        self.domain, self.epsilon = config.domain, config.epsilon
        self.release_every, self.mechanism = config.release_every, config.mechanism
        self.counter, self.fit_name = config.counter, config.fit
        self.neighbours, self.bias = config.neighbours, config.bias
        self.block_size, self.support_size = config.block_size, config.support_size
        self.full_domain_limit, self.fit_passes = config.full_domain_limit, config.fit_passes
        self.fit_rule, self.rejuvenate_every = config.fit_rule, config.rejuvenate_every
        self.partition, self.estimator = config.partition, config.estimator
        self.size_share, self.selection = config.size_share, config.selection
        self.damping = config.damping
        self.guide_floor = GUIDE_FLOOR
        if self.fit_name == "pgm":
            require_mbi()
        self.workloads = Workloads(self.domain.sizes)
        self.k, self.workloads_per_step = config.k, config.workloads_per_step
        self.eps_size = config.eps_size
        self.eps_select, self.eps_measure = config.eps_select, config.eps_measure
        self.worst_case_loss = config.worst_case_loss  # privacy: P1 (issue 7), P12
        self.s = NEIGHBOURS[self.neighbours]
        self.score = config.score
        self.pooled_marginals = config.pooled_marginals
        # §7.2: Δ = 1/min|q_i| (1/4 for 2×2) for the per-cell score; Δ = 1 for the L1 score
        self.em_sensitivity = self.s / (float(self.workloads.cells.min())
                                        if self.score == "mean" else 1.0)
        self._noise = KeyedNoise(key)
        self._ctx = ("tabular", self.partition, self.mechanism, self.counter)
        self.ledger = StepLedger.of_checked(self.epsilon)
        self.schedule = cyclic_order(self._noise, ("tabular", self.partition, "cyclic"),
                                     len(self.workloads))
        self.model = ParticleModel.initial(
            self.workloads, self._noise, ("tabular", self.partition, "support"),
            support_size=self.support_size, full_domain_limit=self.full_domain_limit)
        self.counters = [
            Counter(self.counter, int(c), self.eps_measure, self._noise,
                    (*self._ctx, "ctr", i), sensitivity=self.s, block_size=self.block_size)
            for i, c in enumerate(self.workloads.cells)]
        self.remainders = [np.zeros(int(c)) for c in self.workloads.cells]
        self.fed_records = np.zeros(len(self.workloads), np.int64)  # records each counter saw
        self.size = StreamSize(self.neighbours, self.eps_size, self._noise,
                               (*self._ctx, "size"))
        self.records_seen, self.steps = 0, 0  # records_seen: true count, state only (P12)
        self._pending: list[np.ndarray] = []
        self._n_pending = 0
        self.last_selected: list[int] = []

    # -- public ---------------------------------------------------------------------------

    def public_config(self) -> dict[str, Any]:
        """Everything the state is bound to (no secrets): restore needs the same
        (:meth:`~dpsynth.tabular.config.TabularConfig.public_config`)."""
        return self.config.public_config()

    def metadata(self) -> dict[str, Any]:
        """Public release metadata."""
        return {
            "algorithm": ("paper003-alg3-select-measure-fit" if self.mechanism == "proposed"
                          else "paper003-alg2-streaming-mwem"),
            "method": self.mechanism,
            "counter": self.counter if self.mechanism == "proposed" else None,
            "epsilon": self.epsilon, "epsilon_per_selection": self.eps_select,
            "epsilon_per_measurement": self.eps_measure, "workloads_per_step": self.k,
            **({"selection": self.selection, "estimator": self.estimator}
               if self.mechanism == "proposed" else {}),
            "neighbours": f"{self.neighbours} (one record at one step; event-level on ∇f)",
            "fit": self.fit_name, "fit_rule": self.fit_rule, "bias": self.bias,
            "key_fingerprint": self._noise.fingerprint(), "domain_digest": self.domain.digest(),
            "attributes": list(self.domain.attributes),
            # privacy: P12 — the true count only where it is public; a noisy size otherwise
            **({"records_seen": self.records_seen} if self.neighbours == "replace" else
               {"epsilon_size": self.eps_size, "size": "noisy (unbounded block counter)"}),
        }

    #: The tabular engine protects records: no privacy unit "user", nothing dropped.
    users = None
    dropped = 0

    @property
    def sequence(self) -> int:
        """Releases made so far (one per completed step)."""
        return self.steps

    @property
    def records_fed(self) -> int:
        """Records counted, the open step's included (the true count: state only, P12)."""
        return self.records_seen

    @property
    def open_records(self) -> int:
        """Records of the open step."""
        return self._n_pending

    def records_until_step(self) -> int:
        """Records until :meth:`extend` ends the open step."""
        return self.release_every - self._n_pending

    def add(self, codes: np.ndarray, users: Any = None) -> None:
        """Add records (int codes, shape (n, p)) to the open step; nothing is released."""
        refuse_users(users)
        arr = self.domain.check_codes(codes)
        self._pending.append(arr)
        self._n_pending += arr.shape[0]
        self.records_seen += arr.shape[0]

    def extend(self, codes: np.ndarray, users: Any = None) -> list[TabularRelease]:
        """Add records (int codes, shape (n, p)); a step every ``release_every`` records.

        Replacement only: under add/remove the count is private, so a step may end only on a
        public clock — :meth:`add` the records and call :meth:`step` (docs/privacy.md P11).
        """
        refuse_count_steps(self.neighbours, "add(codes)")  # privacy: P11 (public time)
        refuse_users(users)
        arr = self.domain.check_codes(codes)
        out: list[TabularRelease] = []
        start = 0
        while start < arr.shape[0]:
            take = min(self.release_every - self._n_pending, arr.shape[0] - start)
            self._pending.append(arr[start:start + take])
            self._n_pending += take
            self.records_seen += take
            start += take
            if self._n_pending == self.release_every:
                out.append(self.step())
        return out

    def tick(self) -> TabularRelease | None:
        """A public tick marker: end the step and release; under replacement only when the
        step holds records (None otherwise), under add/remove always (docs/privacy.md P11)."""
        return self.step() if tick_ends_step(self.neighbours, self._n_pending > 0) else None

    def step(self) -> TabularRelease:
        """End the current step now (on a public clock) and return its release."""
        batch = (np.concatenate(self._pending) if self._pending
                 else np.zeros((0, len(self.domain.sizes)), np.int64))
        self._pending, self._n_pending = [], 0
        self.steps += 1
        if self.eps_size:
            self.ledger.charge("size", self.eps_size)
        self.size.feed(batch.shape[0])  # privacy: P12 (noisy under add/remove)
        grad = self.workloads.answers(batch)
        self._fit = step_fit(self.fit_name, self.model,
                             stddev=float(np.sqrt(2.0)) * self.s / self.eps_measure)
        if self.mechanism == "proposed":
            weights = self._proposed_step(grad, batch.shape[0])
        else:
            weights = self._baseline_step(grad)
        self.ledger.close()
        self.model.weights = weights
        records = self.model.records(weights, self.size.rows)  # privacy: P12
        if self.rejuvenate_every and self.steps % self.rejuvenate_every == 0:
            guides = (guide_tables(self.counters, self.guide_floor)
                      if self.estimator == "sample" else None)  # public: DP outputs (T4)
            self.model.rejuvenate(self._noise, ("tabular", self.partition, "rejuv", self.steps),
                                  passes=self.fit_passes, guides=guides)
        meta = self.metadata()
        return TabularRelease(self.steps - 1, self.steps, records, meta)

    def _select(self, target: list[np.ndarray] | None, h: np.ndarray, open_: list[int],
                round_: int) -> int:
        if target is None:  # the public cyclic schedule: reads no data, spends no ε (T18)
            return cyclic_pick(self.schedule, self.steps, self.k, round_)
        self.ledger.charge("select", self.eps_select)
        scores = workload_scores(target, self.model.answers(h), self.workloads.cells, open_,
                                 score=self.score, bias=self.bias)
        pick = exponential_mechanism(scores, self.eps_select, self.em_sensitivity, self._noise,
                                     (*self._ctx, "em", self.steps), 0, round_)
        return open_[pick]

    def _proposed_step(self, grad: list[np.ndarray], batch_size: int) -> np.ndarray:
        target = None
        if self.selection == "em":  # q_i(∇f_t + g_{t−1})
            target = [g + p for g, p in zip(grad, self.model.answers(), strict=True)]
        h = self.model.scaled(self.size.total)  # privacy: P12 (h_{t,0} from a noisy size)
        open_, measured, history = list(range(len(self.workloads))), [], []
        for round_ in range(self.k):
            j = self._select(target, h, open_, round_)
            open_.remove(j)
            self.ledger.charge("measure", self.eps_measure)
            value = self.counters[j].feed(grad[j].astype(np.int64))
            self.fed_records[j] += batch_size
            measured.append((j, value + self.remainders[j]))  # m(t,j) = C_j(t) + r(t,j)
            if self.estimator == "alg3":
                h = self._fit(h, measured, passes=self.fit_passes, rule=self.fit_rule)
                history.append(h)
        if self.estimator == "alg3":
            g: np.ndarray = np.mean(history, axis=0)
            answers = self.model.answers(g)
            for i in open_:  # Alg 3 lines 17–19: unselected workloads take the model's value
                self.remainders[i] = answers[i] - self.counters[i].value
        else:  # T6: every counter's share times the noisy size, damped replay (post-processing)
            g = fit_shares(self.model, h, self.counters, self.size.total,
                           passes=self.fit_passes, damping=self.damping)
        if self.pooled_marginals:
            g = pooled_marginals(self.model, self.counters, self.fed_records,
                                 float(self.records_seen), g)
        self.last_selected = [j for j, _ in measured]
        return g

    def _baseline_step(self, grad: list[np.ndarray]) -> np.ndarray:
        base = self.model.weights
        batch_size = self.size.step_size  # privacy: P12 (exact, or from two noisy totals)
        if batch_size == 0:
            self.last_selected = []
            return base
        h = np.full(base.size, batch_size / base.size)
        scale = self.s / self.eps_measure
        open_, measured, history = list(range(len(self.workloads))), [], []
        for round_ in range(self.k):
            j = self._select(grad, h, open_, round_)
            open_.remove(j)
            self.ledger.charge("measure", self.eps_measure)
            cells = int(self.workloads.cells[j])
            noise = self._noise.discrete_laplace_at(
                scale, (*self._ctx, "measure", self.steps, round_),
                np.arange(cells, dtype=np.uint64), np.zeros(cells, np.uint64))
            measured.append((j, grad[j] + noise))
            h = self._fit(h, measured, passes=self.fit_passes, rule=self.fit_rule)
            history.append(h)
        self.last_selected = [j for j, _ in measured]
        weights: np.ndarray = base + np.mean(history, axis=0)
        return weights

    # -- snapshots ------------------------------------------------------------------------

    def snapshot(self, *, include_users: bool = True) -> bytes:
        """The whole state (holds true pending records and counts; no key material); no
        per-user counts exist (``include_users`` changes nothing)."""
        pending = (np.concatenate(self._pending) if self._pending
                   else np.zeros((0, len(self.domain.sizes)), np.int64))
        return pack_state({
            "kind": SNAPSHOT_KIND, "config": self.public_config(),
            "key_fingerprint": self._noise.fingerprint(),
            "records_seen": self.records_seen, "steps": self.steps, "pending": pending,
            "model": self.model.state(), "counters": [c.state() for c in self.counters],
            "remainders": self.remainders, "ledger_max": self.ledger.max_spent,
            "fed_records": self.fed_records,
            **({"size": self.size.state()} if self.neighbours == "add_remove" else {}),
        })

    @classmethod
    def restore(cls, blob: bytes, key: bytes) -> TabularSynthesizer:
        """Continue from :meth:`snapshot` under the same key; later releases equal an
        uninterrupted run's."""
        state = unpack_state(blob)
        domain, eps, config = _snapshot_config(state)
        self = cls(domain, eps, key, **config)
        self._load_snapshot(state)
        return self

    def _load_snapshot(self, state: dict[str, Any]) -> None:
        """Load a snapshot's state into this synthesizer, freshly built from its configuration
        and key."""
        if self._noise.fingerprint() != state["key_fingerprint"]:
            raise StateCorruptError("snapshot was written under a different noise key; restore "
                                    "it with that key (a new key must start from an empty state)")
        self.records_seen, self.steps = int(state["records_seen"]), int(state["steps"])
        pending = np.asarray(state["pending"], dtype=np.int64)
        self._pending = [pending] if pending.size else []
        self._n_pending = int(pending.shape[0])
        self.model = ParticleModel.from_state(self.workloads, state["model"])
        if len(state["counters"]) != len(self.counters):
            raise StateCorruptError("snapshot counters do not match the domain's workloads")
        for counter, counter_state in zip(self.counters, state["counters"], strict=True):
            counter.load_state(counter_state)
        self.remainders = [np.asarray(r, dtype=np.float64) for r in state["remainders"]]
        self.fed_records = np.asarray(state["fed_records"], dtype=np.int64).copy()
        self.ledger.max_spent, self.ledger.steps = float(state["ledger_max"]), self.steps
        self.size.load_state(state.get("size"), self.records_seen - self._n_pending)


def _snapshot_config(state: dict[str, Any]) -> tuple[Domain, float, dict[str, Any]]:
    """(domain, ε, keyword options) of the synthesizer a snapshot was written by."""
    if state.get("kind") != SNAPSHOT_KIND:
        raise StateCorruptError("not a tabular synthesizer snapshot; restore point synthesizers "
                                "with OnlineSynthesizer.restore")
    config = dict(state["config"])
    domain = Domain.from_dict(config.pop("domain"))
    eps = float(config.pop("epsilon"))
    config["mechanism"] = config.pop("method")
    if "selection" not in config:  # written before issue 17: the EM selection, no damping
        if config.get("estimator") == "sample":
            raise StateCorruptError("the snapshot's estimator='sample' rescaled counters by the "
                                    "records fed to them, which this dpsynth no longer does; "
                                    "start a new run")
        config["selection"] = "em"
    return domain, eps, config
