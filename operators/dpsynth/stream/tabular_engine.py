"""The tabular engine of the worker (``DPSYNTH_ENGINE=tabular``): paper 003 per partition.

Layer: adapter. Everything the worker needs to run :class:`~dpsynth.tabular.synthesizer.
TabularSynthesizer` (Kumar, Strohmer, Vershynin: select-measure-fit over a finite domain, Alg 3,
or the StreamingMWEM baseline, Alg 2) under the same commit protocol as the point synthesizer:

- its settings live in :class:`~dpsynth.stream.settings.WorkerConfig`: ``DPSYNTH_DOMAIN_FILE``
  (required), ``DPSYNTH_TABULAR_MECHANISM``, ``DPSYNTH_TABULAR_COUNTER``,
  ``DPSYNTH_TABULAR_WORKLOADS_PER_STEP``;
- :func:`tabular_public_config`: the public parameters a partition's state is bound to;
- :class:`TabularEngine`: records are encoded by the domain (a record outside it is
  dead-lettered with a reason naming the attribute, never the value), a time step of the paper
  ends at every tick marker (and, under replacement only, every ``DPSYNTH_RELEASE_EVERY``
  valid records), and a release is written in format ``tabular.v1``
  (:mod:`~dpsynth.release.tabular_v1`) under the key ``run/partition/sequence``.

Privacy (paper 003 Thm 6.1): each partition's synthesizer is ε-DP for its own input stream under
event-level neighbours (one record added or removed at one step); partitions hold disjoint
records, so the run is ε-DP by parallel composition. The input partition enters every noise
context, so two partitions never share noise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsynth.errors import StateCorruptError
from dpsynth.release import encode_tabular_release
from dpsynth.schema import ClipReport
from dpsynth.stream.codecs import BatchResult, split_messages
from dpsynth.stream.settings import WorkerConfig
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.synthesizer import TabularSynthesizer

#: The variable that sets each key of :func:`tabular_public_config` (for the mismatch error).
TABULAR_VARIABLES = {
    "engine": "DPSYNTH_ENGINE",
    "domain": "DPSYNTH_DOMAIN_FILE",
    "epsilon": "DPSYNTH_EPSILON",
    "release_every": "DPSYNTH_RELEASE_EVERY",
    "method": "DPSYNTH_TABULAR_MECHANISM",
    "counter": "DPSYNTH_TABULAR_COUNTER",
    "workloads_per_step": "DPSYNTH_TABULAR_WORKLOADS_PER_STEP",
    "key_fingerprint": "DPSYNTH_NOISE_KEY (fingerprint)",
    "synthesizer": "the tabular synthesizer's parameters (DPSYNTH_NEIGHBOURS, or another "
                   "dpsynth version?)",
}


def new_tabular_synthesizer(
    config: WorkerConfig, partition: int, key: bytes | None = None
) -> TabularSynthesizer:
    """A fresh synthesizer of ``partition`` from the configuration (``key``: the run key)."""
    return config.tabular_synthesizer(partition, key)


def tabular_public_config(config: WorkerConfig) -> dict[str, Any]:
    """The public parameters a tabular partition state is bound to (checked at every load)."""
    s = config.tabular
    assert s is not None  # load_config checked it
    synth = new_tabular_synthesizer(config, 0, key=bytes(32))
    return {
        "engine": "tabular",
        "domain": s.domain.to_dict(),
        "epsilon": config.epsilon,
        "release_every": config.release_every,
        "method": s.mechanism,
        "counter": s.counter,
        "workloads_per_step": s.workloads_per_step,
        "key_fingerprint": config.noise_key.fingerprint,
        "synthesizer": _public(synth.public_config()),
    }


def _public(params: dict[str, Any]) -> dict[str, Any]:
    """The synthesizer's own public parameters, less those that differ per key/partition."""
    return {k: v for k, v in params.items() if k not in ("key_fingerprint", "partition")}


class TabularEngine:
    """:class:`~dpsynth.stream.engines.Engine` over a :class:`TabularSynthesizer`."""

    def __init__(self, synth: TabularSynthesizer, domain: Domain, release_every: int) -> None:
        self.synth = synth
        self.domain = domain
        self.release_every = release_every

    @property
    def t(self) -> int:
        """Valid records fed so far, those of the open step included."""
        return int(self.synth.records_seen)

    @property
    def sequence(self) -> int:
        """Releases made so far (one per completed step)."""
        return int(self.synth.steps)

    #: The tabular engine protects records (the privacy unit "user" is the point engine's).
    dropped = 0

    def split(self, values: Sequence[bytes | None],
              keys: Sequence[bytes | None] | None = None) -> BatchResult:
        """Decode messages and encode their records by the domain (one call for the batch);
        the keys are not read."""
        names = self.domain.attributes
        p = len(names)

        def check(records: list[Any], owner: list[int]
                  ) -> tuple[np.ndarray, ClipReport, list[tuple[int, str]]]:
            if not records:
                return np.zeros((0, p), np.int64), ClipReport(names, (0,) * p), []
            codes, reasons = self.domain.encode(records)
            bad = [(i, str(r)) for i, r in enumerate(reasons) if r is not None]
            return codes, ClipReport(names, (0,) * p), bad

        return split_messages(values, check)

    def extend(self, rows: np.ndarray, users: Sequence[bytes] | None = None) -> list[Any]:
        """Feed codes (n×p): a release each ``release_every`` records under replacement; under
        add/remove the records join the open step (privacy: P11)."""
        if self.synth.neighbours == "add_remove":
            self.synth.add(rows)
            return []
        return list(self.synth.extend(rows))

    def tick(self) -> list[Any]:
        """A tick marker (:meth:`TabularSynthesizer.tick`)."""
        release = self.synth.tick()
        return [] if release is None else [release]

    def until_release(self) -> int | None:
        """Records until the next count-defined step end (None under add/remove)."""
        if self.synth.neighbours == "add_remove":
            return None
        return self.release_every - self.synth.pending_records

    def take_user_changes(self) -> None:
        """No per-user counts (privacy unit "record")."""
        return None

    def committed(self) -> None:
        """Nothing cached."""

    def snapshot(self) -> bytes:
        """The synthesizer's snapshot (true counts: protect the data directory)."""
        return bytes(self.synth.snapshot())

    def encode(
        self, release: Any, *, run_id: str, partition: int, max_chunk_bytes: int
    ) -> tuple[int, list[bytes]]:
        """Format ``tabular.v1`` records of one release."""
        return int(release.sequence), encode_tabular_release(
            release, run_id=run_id, partition=partition, max_chunk_bytes=max_chunk_bytes,
        )


def open_tabular_engine(
    config: WorkerConfig, partition: int, snapshot: bytes | None
) -> TabularEngine:
    """A fresh engine for ``partition``, or the one restored from ``snapshot``."""
    s = config.tabular
    assert s is not None  # load_config checked it
    if snapshot is None:
        return TabularEngine(new_tabular_synthesizer(config, partition), s.domain,
                             config.release_every)
    synth = TabularSynthesizer.restore(snapshot, config.noise_key.reveal())
    if synth.partition != partition:
        raise StateCorruptError(
            f"the tabular state in partition {partition}'s directory belongs to partition "
            f"{synth.partition}: give every partition its own directory under "
            "DPSYNTH_DATA_DIR/state (do not copy state between partitions)"
        )
    return TabularEngine(synth, s.domain, config.release_every)
