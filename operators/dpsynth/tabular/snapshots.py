"""What a tabular synthesizer's snapshot holds, and how it is loaded back (no key material).

Layer: core. The snapshot holds true pending records and counts (state, never released: it needs
the protection of the raw input). A snapshot binds the public configuration; one written before
issue 17 (no ``selection`` in it) ran the exponential-mechanism selection, so it is restored with
``selection="em"``, and its ``estimator="sample"`` (which rescaled counters by the records fed) is
refused: start a new run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dpsynth.errors import StateCorruptError
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.model import ParticleModel

if TYPE_CHECKING:
    from dpsynth.tabular.synthesizer import TabularSynthesizer

SNAPSHOT_KIND = "dpsynth.tabular.v1"


def public_config(synth: TabularSynthesizer) -> dict[str, Any]:
    """Everything ``synth``'s state is bound to (no secrets): restore needs the same."""
    extra = {"size_share": synth.size_share} if synth.neighbours == "add_remove" else {}
    return {
        **extra,
        "domain": synth.domain.to_dict(), "epsilon": synth.epsilon,
        "release_every": synth.release_every, "method": synth.mechanism,
        "counter": synth.counter, "workloads_per_step": synth.workloads_per_step,
        "fit": synth.fit_name, "neighbours": synth.neighbours, "bias": synth.bias,
        "block_size": synth.block_size, "support_size": synth.support_size,
        "full_domain_limit": synth.full_domain_limit, "fit_passes": synth.fit_passes,
        "fit_rule": synth.fit_rule, "rejuvenate_every": synth.rejuvenate_every,
        "estimator": synth.estimator, "score": synth.score,
        "selection": synth.selection, "damping": synth.damping,
        "pooled_marginals": synth.pooled_marginals, "partition": synth.partition,
    }


def synthesizer_state(synth: TabularSynthesizer) -> dict[str, Any]:
    """Everything needed to continue ``synth`` (the true pending records included)."""
    pending = (np.concatenate(synth._pending) if synth._pending
               else np.zeros((0, len(synth.domain.sizes)), np.int64))
    return {
        "kind": SNAPSHOT_KIND, "config": synth.public_config(),
        "key_fingerprint": synth._noise.fingerprint(),
        "records_seen": synth.records_seen, "steps": synth.steps, "pending": pending,
        "model": synth.model.state(), "counters": [c.state() for c in synth.counters],
        "remainders": synth.remainders, "ledger_max": synth.ledger.max_spent,
        "fed_records": synth.fed_records,
        **({"size": synth.size.state()} if synth.neighbours == "add_remove" else {}),
    }


def snapshot_config(state: dict[str, Any]) -> tuple[Domain, float, dict[str, Any]]:
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


def load_synthesizer_state(synth: TabularSynthesizer, state: dict[str, Any]) -> None:
    """Load a snapshot's state into a freshly built ``synth`` of the same configuration."""
    if synth._noise.fingerprint() != state["key_fingerprint"]:
        raise StateCorruptError("snapshot was written under a different noise key; restore it "
                                "with that key (a new key must start from an empty state)")
    synth.records_seen, synth.steps = int(state["records_seen"]), int(state["steps"])
    pending = np.asarray(state["pending"], dtype=np.int64)
    synth._pending = [pending] if pending.size else []
    synth._n_pending = int(pending.shape[0])
    synth.model = ParticleModel.from_state(synth.workloads, state["model"])
    if len(state["counters"]) != len(synth.counters):
        raise StateCorruptError("snapshot counters do not match the domain's workloads")
    for counter, counter_state in zip(synth.counters, state["counters"], strict=True):
        counter.load_state(counter_state)
    synth.remainders = [np.asarray(r, dtype=np.float64) for r in state["remainders"]]
    synth.fed_records = np.asarray(state["fed_records"], dtype=np.int64).copy()
    synth.ledger.max_spent, synth.ledger.steps = float(state["ledger_max"]), synth.steps
    synth.size.load_state(state.get("size"), synth.records_seen - synth._n_pending)
