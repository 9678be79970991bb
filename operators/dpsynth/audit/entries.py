"""Entry points the audit runs: what they are, and the library's (issue 13 (5)).

Layer: audit. An :class:`EntryPoint` turns an input (D or a neighbour D′) and a key into an
:class:`Output`: the flat fields of everything it publishes (:mod:`dpsynth.audit.fields`) and a
view its statistics read (:mod:`dpsynth.audit.measures`). The library's entry points are here:
:class:`~dpsynth.online.synthesizer.OnlineSynthesizer` for every mechanism × notion it accepts
(under add/remove steps come from ``add()`` + ``step()``, the public clock; under replacement
from ``extend()``), the offline methods and the tabular engine. The commands' entry points are
in :mod:`dpsynth.cli.audit` (they drive the command code) and the worker's in
:mod:`dpsynth.audit.worker`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dpsynth.audit.fields import Fields, flatten, flatten_records
from dpsynth.audit.inputs import (
    PER_STEP,
    TABLE_SIZES,
    AuditInput,
    Neighbour,
    point_input,
    table_input,
)
from dpsynth.audit.measures import (
    leaves_statistics,
    points_statistics,
    release_statistics,
    table_statistics,
)
from dpsynth.contract import Synthesizer, feed_all
from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise
from dpsynth.offline.lowdim import lowdim_release
from dpsynth.offline.pmm import pmm_leaves
from dpsynth.offline.psmm import psmm_measure
from dpsynth.online.guided import GuidedMechanism
from dpsynth.online.guided.refinement import refine_share
from dpsynth.online.mechanism import AUTO, MECHANISMS, step_mechanisms
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import Release, TabularRelease, encode_release, encode_tabular_release
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.synthesizer import TabularSynthesizer

#: ε of every audited run: small enough that a deterministic difference cannot be noise
#: (fields.false_alarm_bound), large enough for the runs to resolve the records.
AUDIT_EPSILON = 1.0
#: Tree depth cap of the audited runs (small inputs: deeper levels would hold noise only).
AUDIT_MAX_DEPTH = 8
#: Per-record ε of the ``guided`` entries that exercise its paid refinement: the least at
#: which block 0's summary ε reaches REFINE_FROM = 32 (0.9ε add/remove, ε/2 replace), rounded
#: up. Far above what 100 keys can resolve (docs/privacy.md P14 "Power"): these entries show the
#: refined path publishes nothing constant per input and runs through the public entry point.
REFINED_EPSILON = {"add_remove": 36.0, "replace": 64.0}
#: The noisy outputs of a point release (:attr:`EntryPoint.noisy_outputs`): its size, depth and
#: leaf counts and what encodes them (chunk sizes and counts, record lengths, the digest).
POINT_OUTPUTS = frozenset(f"release.record.{name}" for name in (
    "t", "metadata.t", "depth", "metadata.depth", "cells", "counts", "n_chunks", "bytes",
    "sha256")) | {"release.records"}
NOTIONS = ("replace", "add_remove")


@dataclass(frozen=True)
class Output:
    """What one run published (``fields``) and what its statistics read (``view``)."""

    fields: Fields
    view: Any


@dataclass(frozen=True)
class EntryPoint:
    """One public entry point under one notion.

    ``run(data, key)`` runs it on one input under one key; ``statistics(view, probe)`` reads
    the release statistics aimed at a neighbour's changed record; ``outputs`` runs many inputs
    under many keys (the worker overrides it to share one broker run among them).
    """

    name: str
    notion: str
    input: Callable[[], AuditInput]
    run: Callable[[AuditInput, bytes], Output]
    statistics: Callable[[Any, Neighbour], dict[str, float]]
    epsilon: float = AUDIT_EPSILON
    batch: Callable[[Sequence[AuditInput], Sequence[bytes]], list[list[Output]]] | None = \
        field(default=None)
    #: The neighbours of D, when not the record-level ones of :func:`inputs.neighbours`
    #: (the privacy unit "user": :mod:`dpsynth.audit.users`).
    pairs: Callable[[AuditInput], list[Neighbour]] | None = field(default=None)
    #: Kinds of fields (:func:`~dpsynth.audit.fields.field_kind`) that are the mechanism's
    #: noisy outputs and that (a) cannot judge at this entry's ε: far above 1 an ε-DP output
    #: may well be constant per input (false-alarm bound ≈ 1). Their deterministic
    #: differences are reported, not failed; every other field is judged as usual.
    noisy_outputs: frozenset[str] = frozenset()

    def outputs(self, inputs: Sequence[AuditInput],
                keys: Sequence[bytes]) -> list[list[Output]]:
        """``outputs[i][j]``: input i under key j."""
        if self.batch is not None:
            return self.batch(inputs, keys)
        return [[self.run(data, key) for key in keys] for data in inputs]


def run_id_of(key: bytes) -> str:
    """The default run id of the commands and the worker: run-<key fingerprint> (P13)."""
    return f"run-{KeyedNoise(key).fingerprint()}"


def point_releases_output(releases: Sequence[Release], key: bytes) -> Output:
    """Encode point releases as the worker and ``dpsynth run`` publish them; flatten them."""
    fields: Fields = {"releases": len(releases)}
    for i, release in enumerate(releases):
        sequence = int(release.metadata["sequence"])
        flatten_records(encode_release(release, run_id=run_id_of(key), partition=0,
                                       sequence=sequence), f"release[{i}]", fields)
    return Output(fields, list(releases))


def table_releases_output(releases: Sequence[TabularRelease], key: bytes) -> Output:
    """Encode tabular releases as published (``tabular.v1``); flatten them."""
    fields: Fields = {"releases": len(releases)}
    for i, release in enumerate(releases):
        flatten_records(encode_tabular_release(release, run_id=run_id_of(key), partition=0),
                        f"release[{i}]", fields)
    return Output(fields, [np.asarray(r.records) for r in releases])


# -- the library ----------------------------------------------------------------------------


def drive(synth: Synthesizer[Any], data: AuditInput) -> list[Any]:
    """Every release of ``synth`` over ``data`` through the contract's feed loop: one public
    step per step under add/remove (P11), the steps' records in order under replacement."""
    users = data.users if data.users is not None else [None] * len(data.steps)
    chunks = ((step, None if ids is None else list(ids))
              for step, ids in zip(data.steps, users, strict=True))
    return feed_all(synth, chunks, steps=synth.neighbours == "add_remove")


def online_entry(mechanism: str, notion: str, d: int = 2, epsilon: float = AUDIT_EPSILON,
                 suffix: str = "", release_growth: float = 0.0) -> EntryPoint:
    """``OnlineSynthesizer(mechanism=…, neighbours=…)``: add + step per step (add/remove), or
    ``extend`` with a release every step's records (replacement; with ``release_growth``,
    steps that grow with t)."""

    def run(data: AuditInput, key: bytes) -> Output:
        synth = OnlineSynthesizer(d, epsilon, key, PER_STEP, mechanism,
                                  AUDIT_MAX_DEPTH, neighbours=notion,
                                  release_growth=release_growth)
        return point_releases_output(drive(synth, data), key)

    name = f"library:{mechanism}:{notion}" + ("" if d == 2 else f":d{d}") + suffix
    return EntryPoint(name, notion, lambda: point_input(d), run,
                      release_statistics, epsilon=epsilon)


def refined_entry(notion: str) -> EntryPoint:
    """``guided`` at :data:`REFINED_EPSILON`, where block 0's summary (the first step, which
    two of the neighbours change) pays for a PrivTree refinement (docs/privacy.md P16) — a
    ConfigError here if a change of the shares or of REFINE_FROM stopped that."""
    epsilon = REFINED_EPSILON[notion]
    budget = GuidedMechanism.budget_for(epsilon, notion)
    block0 = budget.counts + budget.steps  # block 0 has no time nodes: both shares
    if refine_share(block0) == 0.0:
        raise ConfigError(f"the refined audit entry ({notion}) no longer refines at "
                          f"epsilon={epsilon}: raise REFINED_EPSILON in dpsynth.audit.entries")
    return replace(online_entry("guided", notion, epsilon=epsilon, suffix=":refined"),
                   noisy_outputs=POINT_OUTPUTS)


def offline_entry(method: str, notion: str) -> EntryPoint:
    """``pmm_leaves``, ``psmm_measure`` or ``lowdim_release`` on all records of D (d = 2;
    lowdim d = 3, a subspace of dimension 2)."""
    d = 3 if method == "lowdim" else 2

    def run(data: AuditInput, key: bytes) -> Output:
        points = data.records
        fields: Fields = {}
        if method == "pmm":
            depth, leaves, seed = pmm_leaves(points, AUDIT_EPSILON, key, neighbours=notion,
                                             max_depth=AUDIT_MAX_DEPTH)
            flatten({"depth": depth, "leaf_counts": leaves, "placement_seed": seed}, "pmm",
                    fields)
            return Output(fields, ("leaves", depth, leaves))
        if method == "psmm":
            res = psmm_measure(points, AUDIT_EPSILON, key, neighbours=notion)
            flatten({"side_bits": res.side_bits, "leaf_counts": res.leaf_counts,
                     "metadata": res.metadata, "lp_variables": res.lp.variables,
                     "lp_distance": res.lp.distance}, "psmm", fields)
            return Output(fields, ("leaves", res.depth, res.leaf_counts))
        low = lowdim_release(points, AUDIT_EPSILON, key, 2, neighbours=notion)
        flatten({"points": low.points, "target_dim": low.target_dim, "basis": low.basis,
                 "centre": low.centre, "eigenvalues": low.eigenvalues,
                 "metadata": low.metadata}, "lowdim", fields)
        return Output(fields, ("points", low.points))

    return EntryPoint(f"library:{method}:{notion}", notion, lambda: point_input(d), run,
                      offline_statistics)


def offline_statistics(view: tuple[Any, ...], probe: Neighbour) -> dict[str, float]:
    """Statistics of an offline output: compact leaves, or synthetic points."""
    if view[0] == "leaves":
        return leaves_statistics(view[1], view[2], probe)
    return points_statistics(view[1], probe)


def table_domain() -> Domain:
    """The audit's table domain: attributes a, b, c of :data:`TABLE_SIZES` values."""
    return Domain.from_dict({"version": 1, "name": "audit", "attributes": [
        {"name": name, "size": size} for name, size in zip("abc", TABLE_SIZES, strict=True)]})


def tabular_entry(notion: str) -> EntryPoint:
    """``TabularSynthesizer(neighbours=…)``: add + step per step (add/remove), ``extend``
    (replacement)."""

    def run(data: AuditInput, key: bytes) -> Output:
        synth = TabularSynthesizer(table_domain(), AUDIT_EPSILON, key, release_every=PER_STEP,
                                   neighbours=notion)
        return table_releases_output(drive(synth, data), key)

    return EntryPoint(f"library:tabular:{notion}", notion, table_input, run, table_statistics)


def library_entries() -> list[EntryPoint]:
    """Every library entry point × the notions it accepts."""
    entries = [online_entry(m, "replace") for m in (*MECHANISMS, AUTO)]
    entries += [online_entry(m, "add_remove") for m in (*step_mechanisms(), AUTO)]
    entries += [online_entry("auto", n, d=1) for n in NOTIONS]  # d = 1: auto is guided
    entries += [refined_entry(n) for n in NOTIONS]  # guided's paid refinement (P16)
    # steps of 10, 20 and 40 records over the 120 (release_growth 0.5: releases at 10, 20,
    # 30, 40, 60, 80, 120)
    entries += [online_entry("guided", "replace", suffix=":growth", release_growth=0.5)]
    entries += [offline_entry(m, n) for m in ("pmm", "psmm") for n in NOTIONS]
    entries += [offline_entry("lowdim", "replace")]
    entries += [tabular_entry(n) for n in NOTIONS]
    return entries
