"""Synthetic tabular streams: select–measure–fit (paper 003 Alg 3) and StreamingMWEM (Alg 2).

Layer: core. Insertion-only stream over a declared finite domain, in public steps: ``add``
records, ``step()`` on a public clock (tick marker, time bucket, the paper's fixed batches);
``extend`` (a step every ``release_every`` records) under replacement only. A table has |f_t|
rows under replacement, a noisy count's under add/remove (:mod:`~dpsynth.tabular.size`).

``mechanism="proposed"`` (Alg 3, workload version §7.2): per step t, k = ``workloads_per_step``
rounds of (1) select an unselected 2-way workload by the exponential mechanism on
``e_i = ‖q_i(∇f_t + g_{t−1}) − q_i(h_{t,l−1})‖₁/|q_i| − bias_i`` (sensitivity Δ = s/min|q_i|);
(2) feed q_j(∇f_t) to workload j's counter and measure ``m_j = C_j(t) + r_j``; (3) MW-fit h from
``h_{t,l−1}`` to this step's measurements. ``g_t = avg_l h_{t,l}``; for every unselected i,
``r_i = q_i(g_t) − C_i(t)`` (Alg 3 lines 17–19, not the inverted §6.2 formula).
``mechanism="baseline"`` (Alg 2): the same loop on ∇f_t alone with Lap(2k·s/ε) measurements, and
``g_t = g_{t−1} + avg_l h_{t,l}``.

Privacy: ε-DP for the whole stream under the paper's neighbours (one record added or removed
at one step; ``neighbours="replace"`` doubles every sensitivity s). Under add/remove a size
counter spends ε_n = ``size_share``·ε; each step (ε − ε_n)/(2k) per selection and per counter
(:func:`dpsynth.accounting.select_measure_split`), checked at construction and charged on a
:class:`~dpsynth.accounting.StepLedger` (docs/privacy.md P12). All noise is derived from ``key``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsynth.accounting import StepLedger, check_select_measure_budget, select_measure_split
from dpsynth.errors import ConfigError, StateCorruptError
from dpsynth.noise import KeyedNoise
from dpsynth.release import TabularRelease
from dpsynth.state import pack_state, unpack_state
from dpsynth.tabular.counters import Counter
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.estimators import pooled_marginals, sample_replay
from dpsynth.tabular.model import ParticleModel
from dpsynth.tabular.options import FITS, METHODS, NEIGHBOURS, check_options
from dpsynth.tabular.pgm import PGMFit, require_mbi
from dpsynth.tabular.selection import exponential_mechanism
from dpsynth.tabular.size import SIZE_SHARE, StreamSize
from dpsynth.tabular.workloads import Workloads

_SNAPSHOT_KIND = "dpsynth.tabular.v1"
__all__ = ["FITS", "METHODS", "TabularSynthesizer"]


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
        k, selections per step (capped at the number of workloads).
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
    estimator, score, pooled_marginals
        Measured variants (docs/tabular.md T6, T9, T16); the defaults are Alg 3 as printed.
    partition
        Input partition served; enters every noise context.

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
        size_share: float = SIZE_SHARE,
    ) -> None:
        check_options(domain, mechanism=mechanism, counter=counter, fit=fit,
                      neighbours=neighbours, bias=bias, fit_rule=fit_rule, score=score,
                      release_every=release_every, workloads_per_step=workloads_per_step,
                      fit_passes=fit_passes, rejuvenate_every=rejuvenate_every,
                      support_size=support_size, partition=partition, estimator=estimator,
                      pooled_marginals=pooled_marginals, size_share=size_share)
        self.domain, self.epsilon = domain, float(epsilon)
        self.release_every, self.mechanism, self.counter = release_every, mechanism, counter
        self.fit_name, self.neighbours, self.bias = fit, neighbours, bias
        self.block_size, self.support_size = int(block_size), support_size
        self.full_domain_limit, self.fit_passes = int(full_domain_limit), fit_passes
        self.fit_rule, self.rejuvenate_every, self.partition = fit_rule, rejuvenate_every, partition
        self.estimator, self.size_share = estimator, float(size_share)
        if fit == "pgm":
            require_mbi()
        self.workloads = Workloads(domain.sizes)
        self.k = min(workloads_per_step, len(self.workloads))
        self.workloads_per_step = workloads_per_step
        # the count is public under replacement; under add/remove a size counter spends ε_n
        self.eps_size = self.size_share * self.epsilon if neighbours == "add_remove" else 0.0
        self.eps_select, self.eps_measure = select_measure_split(self.epsilon, self.k,
                                                                 self.eps_size)
        self.worst_case_loss = check_select_measure_budget(  # privacy: P1 (issue 7), P12
            self.epsilon, self.k, self.eps_select, self.eps_measure, self.eps_size)
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
        self.size = StreamSize(neighbours, self.eps_size, self._noise, (*self._ctx, "size"))
        self.records_seen, self.steps = 0, 0  # records_seen: true count, state only (P12)
        self._pending: list[np.ndarray] = []
        self._n_pending = 0
        self.last_selected: list[int] = []

    # -- public ---------------------------------------------------------------------------

    def public_config(self) -> dict[str, Any]:
        """Everything the state is bound to (no secrets): restore needs the same."""
        extra = {"size_share": self.size_share} if self.neighbours == "add_remove" else {}
        return {**extra,
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
            "attributes": list(self.domain.attributes),
            # privacy: P12 — the true count only where it is public; a noisy size otherwise
            **({"records_seen": self.records_seen} if self.neighbours == "replace" else
               {"epsilon_size": self.eps_size, "size": "noisy (unbounded block counter)"}),
        }

    def add(self, codes: np.ndarray) -> None:
        """Add records (int codes, shape (n, p)) to the open step; nothing is released."""
        arr = self.domain.check_codes(codes)
        self._pending.append(arr)
        self._n_pending += arr.shape[0]
        self.records_seen += arr.shape[0]

    def extend(self, codes: np.ndarray) -> list[TabularRelease]:
        """Add records (int codes, shape (n, p)); a step every ``release_every`` records.

        Replacement only: under add/remove the count is private, so a step may end only on a
        public clock — :meth:`add` the records and call :meth:`step` (docs/privacy.md P11).
        """
        if self.neighbours == "add_remove":  # privacy: P11 (steps never counted in records)
            raise ConfigError(
                "extend() ends a step every release_every records, which reveals the private "
                "record count under neighbours='add_remove'; add(codes) the records of a step "
                "and end it with step() on a public clock (a timer, a tick marker, a time "
                "bucket or the fixed batches of the paper's streams), docs/privacy.md P11")
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

    @property
    def pending_records(self) -> int:
        """Records of the open step."""
        return self._n_pending

    def tick(self) -> TabularRelease | None:
        """A public tick marker: end the step and release; under replacement only when the
        step holds records (None otherwise), under add/remove always (docs/privacy.md P11)."""
        return None if self.neighbours == "replace" and not self._n_pending else self.step()

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
        self._fit = self._fitter()
        if self.mechanism == "proposed":
            weights = self._proposed_step(grad, batch.shape[0])
        else:
            weights = self._baseline_step(grad)
        self.ledger.close()
        self.model.weights = weights
        records = self.model.records(weights, self.size.rows)  # privacy: P12
        if self.rejuvenate_every and self.steps % self.rejuvenate_every == 0:
            self.model.rejuvenate(self._noise, ("tabular", self.partition, "rejuv", self.steps),
                                  passes=self.fit_passes)
        meta = self.metadata()
        return TabularRelease(self.steps - 1, self.steps, records, meta)

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
        h = self.model.scaled(self.size.total)  # privacy: P12 (h_{t,0} from a noisy size)
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
            g = pooled_marginals(self.model, self.counters, self.fed_records,
                                 float(self.records_seen), g)
        answers = self.model.answers(g)
        for i in open_:  # Alg 3 lines 17–19: unselected workloads take the model's value
            self.remainders[i] = answers[i] - self.counters[i].value
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
        return base + np.mean(history, axis=0)

    def _fitter(self) -> Any:
        """This step's fit: ``model.fit`` (MW) or a fresh :class:`PGMFit` (no PGM state)."""
        if self.fit_name == "mw":
            return self.model.fit
        return PGMFit(self.model, stddev=float(np.sqrt(2.0)) * self.s / self.eps_measure)

    def _replay(self, measured: list[tuple[int, np.ndarray]]) -> list[tuple[int, np.ndarray]]:
        """Alg 3: this step's measurements (``"sample"``, T6: :func:`sample_replay`)."""
        return measured if self.estimator == "alg3" else sample_replay(
            self.counters, self.fed_records, float(self.records_seen), measured)

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
            **({"size": self.size.state()} if self.neighbours == "add_remove" else {}),
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
        self.size.load_state(state.get("size"), self.records_seen - self._n_pending)
        return self
