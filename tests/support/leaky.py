"""Deliberately leaking entry points: the code as it was before issue 13's fixes, for the audit.

Our own tests' kit (not shipped). Each wraps a real engine the way the leaking code drove it:

- :func:`counted_steps_entry` — add/remove steps ended every N records (``_extend_steps``
  before issue 13): the number of releases, and every later step boundary, follow the count,
  and the metadata carries ``release_every`` again (step × release_every = the count);
- :func:`exact_count_entry` — the tabular engine under add/remove with ``records_seen`` in its
  metadata (before issue 13 item 2);
- :func:`overspent_size_entry` — a release whose size is the count plus Lap_Z(1/(3ε)): no
  deterministic difference, a 3× overspent size counter that only the ε lower bound sees.
"""

from __future__ import annotations

import numpy as np

from dpsynth.audit.entries import (
    AUDIT_EPSILON,
    AUDIT_MAX_DEPTH,
    EntryPoint,
    Output,
    point_releases_output,
    table_domain,
    table_releases_output,
)
from dpsynth.audit.inputs import PER_STEP, AuditInput, point_input, table_input
from dpsynth.audit.measures import release_statistics, table_statistics
from dpsynth.noise import KeyedNoise
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import Release
from dpsynth.tabular.synthesizer import TabularSynthesizer


def counted_steps_entry(every: int = PER_STEP) -> EntryPoint:
    """adaptive under add/remove, a step every ``every`` records of the concatenated input."""

    def run(data: AuditInput, key: bytes) -> Output:
        synth = OnlineSynthesizer(2, AUDIT_EPSILON, key, every, "adaptive", AUDIT_MAX_DEPTH,
                                  neighbours="add_remove")
        records = data.records
        releases = []
        for start in range(0, len(records) - every + 1, every):  # the leak: a count clock
            synth.add(records[start:start + every])
            release = synth.step()
            releases.append(Release(release.t, release.depth, release.leaf_counts,
                                    {**release.metadata, "release_every": every},
                                    release.placement_seed))
        return point_releases_output(releases, key)

    return EntryPoint("leaky:counted-steps:add_remove", "add_remove", point_input, run,
                      release_statistics)


def exact_count_entry() -> EntryPoint:
    """The tabular engine under add/remove publishing the exact ``records_seen``."""

    def run(data: AuditInput, key: bytes) -> Output:
        synth = TabularSynthesizer(table_domain(), AUDIT_EPSILON, key, release_every=PER_STEP)
        releases = []
        for step in data.steps:
            synth.add(step)
            release = synth.step()
            release.metadata["records_seen"] = synth.records_seen  # the leak
            releases.append(release)
        return table_releases_output(releases, key)

    return EntryPoint("leaky:exact-count:add_remove", "add_remove", table_input, run,
                      table_statistics)


def overspent_size_entry(factor: float = 3.0) -> EntryPoint:
    """adaptive under add/remove whose released size is t + Lap_Z(1/(factor·ε))."""

    def run(data: AuditInput, key: bytes) -> Output:
        synth = OnlineSynthesizer(2, AUDIT_EPSILON, key, PER_STEP, "adaptive", AUDIT_MAX_DEPTH,
                                  neighbours="add_remove")
        noise = KeyedNoise(key)
        releases = []
        for i, step in enumerate(data.steps):
            synth.add(step)
            release = synth.step()
            size = synth.t + int(noise.discrete_laplace_at(
                1.0 / (factor * AUDIT_EPSILON), ("leaky-size",), i, 0)[0])  # the leak
            counts = np.zeros(1, np.int64)
            counts[0] = max(size, 0)
            releases.append(Release(int(counts[0]), 0, counts, dict(release.metadata),
                                    release.placement_seed))
        return point_releases_output(releases, key)

    return EntryPoint("leaky:overspent-size:add_remove", "add_remove", point_input, run,
                      release_statistics)
