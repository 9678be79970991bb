"""Synthetic tabular streams: select–measure–fit (paper 003 Alg 3) and StreamingMWEM (Alg 2).

Layer: core. Insertion-only stream of records over a declared finite domain; a step ends every
``release_every`` records or at a forced :meth:`TabularSynthesizer.step` (tick marker), and each
step releases a synthetic table of exactly as many records as seen so far.

``mechanism="proposed"`` (Alg 3, workload version §7.2): per step t, k = ``workloads_per_step``
rounds of (1) select an unselected 2-way workload by the exponential mechanism on
``e_i = ‖q_i(∇f_t + g_{t−1}) − q_i(h_{t,l−1})‖₁/|q_i| − bias_i`` (sensitivity Δ = s/min|q_i|);
(2) feed q_j(∇f_t) to workload j's counter and measure ``m_j = C_j(t) + r_j``; (3) MW-fit h from
``h_{t,l−1}`` to this step's measurements. ``g_t = avg_l h_{t,l}``; for every unselected i,
``r_i = q_i(g_t) − C_i(t)`` (Alg 3 lines 17–19, not the inverted §6.2 formula).
``mechanism="baseline"`` (Alg 2): the same loop on ∇f_t alone with Lap(2k·s/ε) measurements, and
``g_t = g_{t−1} + avg_l h_{t,l}``.

Privacy: ε-DP for the whole stream under the paper's neighbours (one record added or removed
at one step; ``neighbours="replace"`` doubles every sensitivity s). Each step spends ε/(2k) per
selection and per counter/measurement (:func:`dpsynth.accounting.select_measure_split`),
checked at construction and charged at run time on a :class:`~dpsynth.accounting.StepLedger`.
All randomness is derived from ``key``. The record count per step is public (§4.2.1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsynth.accounting import StepLedger, check_select_measure_budget, select_measure_split
from dpsynth.errors import ConfigError, StateCorruptError
from dpsynth.noise import KeyedNoise
from dpsynth.release import TabularRelease
from dpsynth.state import pack_state, unpack_state
from dpsynth.tabular.counters import COUNTERS, Counter
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.model import RULES, ParticleModel
from dpsynth.tabular.pgm import PGMFit, require_mbi
from dpsynth.tabular.selection import exponential_mechanism
from dpsynth.tabular.workloads import Workloads

METHODS = ("proposed", "baseline")
FITS = ("mw", "pgm")
NEIGHBOURS = {"add_remove": 1.0, "replace": 2.0}
BIASES = ("none", "paper", "scaled")
SCORES, ESTIMATORS = ("mean", "l1"), ("alg3", "sample")
_SNAPSHOT_KIND = "dpsynth.tabular.v1"


class TabularSynthesizer:
    """Continual ε-DP synthetic tables whose 2-way marginals track an insertion-only stream.

    Parameters
    ----------
    domain, epsilon, key
        Declared domain, total ε for the whole stream, secret noise key (≥ 16 bytes).
    release_every
        A step (and a release) every this many records.
    mechanism, counter
        ``"proposed"`` (Alg 3) or ``"baseline"`` (Alg 2); counter of Alg 3: ``"simple"``,
        ``"block"`` (fixed ``block_size``) or ``"unbounded_block"`` (Alg 4).
    workloads_per_step
        k, selections per step (capped at the number of workloads).
    fit
        ``"mw"`` (multiplicative weights, :mod:`dpsynth.tabular.model`) or ``"pgm"`` (a
        graphical model by private-pgm, :mod:`dpsynth.tabular.pgm`; optional extra).
    neighbours
        ``"add_remove"`` (paper) or ``"replace"``.
    bias
        Selection bias term: ``"none"`` (default), ``"paper"`` (−|X_cols| as printed) or
        ``"scaled"`` (−1, a no-op under EM).
    block_size
        B of the bounded ``"block"`` counter.
    support_size, full_domain_limit, fit_passes, fit_rule, rejuvenate_every
        The MW model (:mod:`dpsynth.tabular.model`; docs/tabular.md T4).
    estimator, score, pooled_marginals
        Measured variants (docs/tabular.md T6, T9, T16); the defaults are Alg 3 as printed.
    partition
        Input partition served; enters every noise context.

    >>> dom = Domain.from_dict({"a": 2, "b": 3, "c": 2})
    >>> synth = TabularSynthesizer(dom, 1.0, bytes(32), release_every=10)
    >>> rel = synth.extend(np.zeros((25, 3), np.int64))
    >>> [r.step for r in rel], rel[-1].records.shape, synth.records_seen
    ([1, 2], (20, 3), 25)
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
        workloads_per_step: int = 3,
        fit: str = "mw",
        neighbours: str = "add_remove",
        bias: str = "none",
        block_size: int = 8,
        support_size: int = 8192,
        full_domain_limit: int = 1 << 16,
        fit_passes: int = 2,
        fit_rule: str = "ratio",
        rejuvenate_every: int = 5,
        estimator: str = "alg3",
        score: str = "mean",
        pooled_marginals: bool = False,
        partition: int = 0,
    ) -> None:
        if not isinstance(domain, Domain):
            raise ConfigError("domain must be a dpsynth.tabular.Domain (Domain.from_json_file)")
        choices = (("mechanism", mechanism, METHODS), ("counter", counter, COUNTERS),
                   ("fit", fit, FITS), ("neighbours", neighbours, tuple(NEIGHBOURS)),
                   ("bias", bias, BIASES), ("fit_rule", fit_rule, RULES),
                   ("score", score, SCORES))
        for name, value, allowed in choices:
            if value not in allowed:
                raise ConfigError(f"`{name}` ({value!r}) must be one of {list(allowed)}")
        for name, value, low in (("release_every", release_every, 1),
                                 ("workloads_per_step", workloads_per_step, 1),
                                 ("fit_passes", fit_passes, 1),
                                 ("rejuvenate_every", rejuvenate_every, 0),
                                 ("support_size", support_size, 1), ("partition", partition, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"`{name}` ({value!r}) must be an integer >= {low}")
        if len(domain.sizes) < 2:
            raise ConfigError("the domain needs at least 2 attributes (2-way workloads)")
        self.domain, self.epsilon = domain, float(epsilon)
        self.release_every, self.mechanism, self.counter = release_every, mechanism, counter
        self.fit_name, self.neighbours, self.bias = fit, neighbours, bias
        self.block_size, self.support_size = int(block_size), support_size
        self.full_domain_limit, self.fit_passes = int(full_domain_limit), fit_passes
        self.fit_rule, self.rejuvenate_every, self.partition = fit_rule, rejuvenate_every, partition
        if estimator not in ESTIMATORS:
            raise ConfigError(f"`estimator` ({estimator!r}) must be one of {list(ESTIMATORS)}")
        self.estimator = estimator
        if fit == "pgm":
            require_mbi()
        self.workloads = Workloads(domain.sizes)
        self.k = min(workloads_per_step, len(self.workloads))
        self.workloads_per_step = workloads_per_step
        self.eps_select, self.eps_measure = select_measure_split(self.epsilon, self.k)
        self.worst_case_loss = check_select_measure_budget(  # privacy: P1 (issue 7)
            self.epsilon, self.k, self.eps_select, self.eps_measure)
        self.s = NEIGHBOURS[neighbours]
        self.score = score
        self.pooled_marginals = bool(pooled_marginals)
        # §7.2: Δ = 1/min|q_i| (1/4 for 2×2) for the per-cell score; Δ = 1 for the L1 score
        self.em_sensitivity = self.s / (float(self.workloads.cells.min()) if score == "mean"
                                        else 1.0)
        self._noise = KeyedNoise(key)
        self._ctx = ("tabular", partition, mechanism, counter)
        self.ledger = StepLedger(self.epsilon)
        self.model = ParticleModel.initial(
            self.workloads, self._noise, ("tabular", partition, "support"),
            support_size=support_size, full_domain_limit=self.full_domain_limit)
        self.counters = [
            Counter(counter, int(c), self.eps_measure, self._noise, (*self._ctx, "ctr", i),
                    sensitivity=self.s, block_size=self.block_size)
            for i, c in enumerate(self.workloads.cells)]
        self.remainders = [np.zeros(int(c)) for c in self.workloads.cells]
        self.fed_records = np.zeros(len(self.workloads), np.int64)  # records each counter saw
        self.records_seen, self.steps = 0, 0
        self._pending: list[np.ndarray] = []
        self._n_pending = 0
        self.last_selected: list[int] = []

    # -- public ---------------------------------------------------------------------------

    def public_config(self) -> dict[str, Any]:
        """Everything the state is bound to (no secrets): restore needs the same."""
        return {
            "domain": self.domain.to_dict(), "epsilon": self.epsilon,
            "release_every": self.release_every, "method": self.mechanism,
            "counter": self.counter, "workloads_per_step": self.workloads_per_step,
            "fit": self.fit_name, "neighbours": self.neighbours, "bias": self.bias,
            "block_size": self.block_size, "support_size": self.support_size,
            "full_domain_limit": self.full_domain_limit, "fit_passes": self.fit_passes,
            "fit_rule": self.fit_rule, "rejuvenate_every": self.rejuvenate_every,
            "estimator": self.estimator, "score": self.score,
            "pooled_marginals": self.pooled_marginals, "partition": self.partition,
        }

    def metadata(self) -> dict[str, Any]:
        """Public release metadata."""
        return {
            "algorithm": ("paper003-alg3-select-measure-fit" if self.mechanism == "proposed"
                          else "paper003-alg2-streaming-mwem"),
            "method": self.mechanism,
            "counter": self.counter if self.mechanism == "proposed" else None,
            "epsilon": self.epsilon, "epsilon_per_selection": self.eps_select,
            "epsilon_per_measurement": self.eps_measure, "workloads_per_step": self.k,
            "neighbours": f"{self.neighbours} (one record at one step; event-level on ∇f)",
            "fit": self.fit_name, "fit_rule": self.fit_rule, "bias": self.bias,
            "key_fingerprint": self._noise.fingerprint(), "domain_digest": self.domain.digest(),
            "attributes": list(self.domain.attributes), "records_seen": self.records_seen,
        }

    def extend(self, codes: np.ndarray) -> list[TabularRelease]:
        """Add records (int codes, shape (n, p)); return the releases of completed steps."""
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

    def step(self) -> TabularRelease:
        """End the current step now (tick marker) and return its release."""
        batch = (np.concatenate(self._pending) if self._pending
                 else np.zeros((0, len(self.domain.sizes)), np.int64))
        self._pending, self._n_pending = [], 0
        self.steps += 1
        grad = self.workloads.answers(batch)
        self._fit = self._fitter()
        if self.mechanism == "proposed":
            weights = self._proposed_step(grad, batch.shape[0])
        else:
            weights = self._baseline_step(grad, batch.shape[0])
        self.ledger.close()
        self.model.weights = weights
        records = self.model.records(weights, self.records_seen)
        if self.rejuvenate_every and self.steps % self.rejuvenate_every == 0:
            self.model.rejuvenate(self._noise, ("tabular", self.partition, "rejuv", self.steps),
                                  passes=self.fit_passes)
        meta = self.metadata()
        return TabularRelease(self.steps - 1, self.steps, records, meta)

    # -- the two algorithms -----------------------------------------------------------------

    def _scores(self, target: list[np.ndarray], h: np.ndarray, open_: list[int]) -> np.ndarray:
        answers = self.model.answers(h)
        scores = np.array([np.abs(target[i] - answers[i]).sum() for i in open_])
        if self.score == "mean":
            scores = scores / self.workloads.cells[open_]
        if self.bias == "paper":
            scores -= self.workloads.cells[open_]
        elif self.bias == "scaled":
            scores -= 1.0
        return scores

    def _select(self, target: list[np.ndarray], h: np.ndarray, open_: list[int],
                round_: int) -> int:
        self.ledger.charge("select", self.eps_select)
        scores = self._scores(target, h, open_)
        pick = exponential_mechanism(scores, self.eps_select, self.em_sensitivity, self._noise,
                                     (*self._ctx, "em", self.steps), 0, round_)
        return open_[pick]

    def _proposed_step(self, grad: list[np.ndarray], batch_size: int) -> np.ndarray:
        prev = self.model.answers()
        target = [g + p for g, p in zip(grad, prev, strict=True)]  # q_i(∇f_t + g_{t−1})
        h = self.model.scaled(float(self.records_seen))
        open_, measured, history = list(range(len(self.workloads))), [], []
        for round_ in range(self.k):
            j = self._select(target, h, open_, round_)
            open_.remove(j)
            self.ledger.charge("measure", self.eps_measure)
            value = self.counters[j].feed(grad[j].astype(np.int64))
            self.fed_records[j] += batch_size
            if self.estimator == "alg3":
                goal = value + self.remainders[j]  # m(t,j) = C_j(t) + r(t,j), Alg 3 line 14
            else:  # decision T6: the counter's records as a sample of the stream
                goal = value * (self.records_seen / self.fed_records[j])
            measured.append((j, goal))
            h = self._fit(h, self._replay(measured), passes=self.fit_passes,
                          rule=self.fit_rule)
            history.append(h)
        g = np.mean(history, axis=0)
        if self.pooled_marginals:
            g = self._fit_pooled_marginals(g)
        answers = self.model.answers(g)
        for i in open_:  # Alg 3 lines 17–19: unselected workloads take the model's value
            self.remainders[i] = answers[i] - self.counters[i].value
        self.last_selected = [j for j, _ in measured]
        return g

    def _baseline_step(self, grad: list[np.ndarray], batch_size: int) -> np.ndarray:
        base = self.model.weights
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
        return base + np.mean(history, axis=0)

    def _fitter(self) -> Any:
        """This step's fit: ``model.fit`` (MW) or a fresh :class:`PGMFit` (warm start within
        the step only, so snapshots need no PGM state)."""
        if self.fit_name == "mw":
            return self.model.fit
        return PGMFit(self.model, stddev=float(np.sqrt(2.0)) * self.s / self.eps_measure)

    def _replay(self, measured: list[tuple[int, np.ndarray]]) -> list[tuple[int, np.ndarray]]:
        """Alg 3: this step's measurements. ``estimator="sample"`` (decision T6): also every
        other fed workload's current estimate n_t · C_i(t) / (records fed to C_i), MWEM-style
        replay — post-processing of the counters' outputs."""
        if self.estimator == "alg3":
            return measured
        now = {j for j, _ in measured}
        scale = float(self.records_seen)
        others = [(i, self.counters[i].value * (scale / self.fed_records[i]))
                  for i in np.flatnonzero(self.fed_records > 0) if int(i) not in now]
        return others + measured

    def _fit_pooled_marginals(self, g: np.ndarray) -> np.ndarray:
        """Post-processing (docs/tabular.md T16): each attribute's 1-way marginal estimated
        from every counter whose workload contains it — Σ_i margin(C_i(t)) / Σ_i (records fed
        to C_i), times |f_t| — and fitted by one multiplicative (ratio) step per attribute."""
        sizes, n = self.workloads.sizes, float(self.records_seen)
        sums = [np.zeros(s_) for s_ in sizes]
        fed = np.zeros(len(sizes))
        for i, (a, b) in enumerate(self.workloads.pairs):
            if self.fed_records[i] == 0:
                continue
            table = self.counters[i].value.reshape(sizes[a], sizes[b]).astype(np.float64)
            sums[a] += table.sum(axis=1)
            sums[b] += table.sum(axis=0)
            fed[a] += self.fed_records[i]
            fed[b] += self.fed_records[i]
        w = g.copy()
        total = float(w.sum())
        for a, size in enumerate(sizes):
            if fed[a] == 0 or total <= 0:
                continue
            target = np.maximum(sums[a], 0.0) * (n / fed[a])
            codes = self.model.support[:, a]
            q = np.bincount(codes, weights=w, minlength=size)
            w *= ((target + 1e-3) / (q + 1e-3))[codes]
            w *= total / w.sum()
        return w

    # -- snapshots ------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state (holds true pending records and counts; no key material)."""
        pending = (np.concatenate(self._pending) if self._pending
                   else np.zeros((0, len(self.domain.sizes)), np.int64))
        return pack_state({
            "kind": _SNAPSHOT_KIND, "config": self.public_config(),
            "key_fingerprint": self._noise.fingerprint(),
            "records_seen": self.records_seen, "steps": self.steps, "pending": pending,
            "model": self.model.state(), "counters": [c.state() for c in self.counters],
            "remainders": self.remainders, "ledger_max": self.ledger.max_spent,
            "fed_records": self.fed_records,
        })

    @classmethod
    def restore(cls, blob: bytes, key: bytes) -> TabularSynthesizer:
        """Continue from :meth:`snapshot` under the same key; later releases equal an
        uninterrupted run's."""
        state = unpack_state(blob)
        if state.get("kind") != _SNAPSHOT_KIND:
            raise StateCorruptError(
                "not a tabular synthesizer snapshot; restore point synthesizers with "
                "OnlineSynthesizer.restore"
            )
        config = dict(state["config"])
        domain = Domain.from_dict(config.pop("domain"))
        eps = config.pop("epsilon")
        config["mechanism"] = config.pop("method")
        self = cls(domain, eps, key, **config)
        if self._noise.fingerprint() != state["key_fingerprint"]:
            raise StateCorruptError(
                "snapshot was written under a different noise key; restore it with that key "
                "(a new key must start from an empty state)"
            )
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
        return self
