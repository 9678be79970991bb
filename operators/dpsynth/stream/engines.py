"""What :class:`~dpsynth.stream.processor.PartitionProcessor` needs of a synthesizer.

Layer: adapter. The commit protocol (skip, replay, decode, feed, produce, commit) does not depend
on what is synthesized; only five things do, and :class:`Engine` names them: how a batch of raw
messages becomes valid rows and rejects, how rows are fed, how state is saved, and how a release
is written to the output topic. Two engines implement it, chosen by ``DPSYNTH_ENGINE``:

- ``points`` (:class:`PointEngine`): the HVZ online synthesizer of points in [0, 1]^d
  (:class:`~dpsynth.online.synthesizer.OnlineSynthesizer`), records checked by the schema;
- ``tabular`` (:class:`~dpsynth.stream.tabular_engine.TabularEngine`): paper 003's
  select-measure-fit synthesizer over a finite domain (:mod:`dpsynth.tabular`), records encoded
  by the domain.

Time (docs/privacy.md P11): both release at every public tick marker (:meth:`Engine.tick`,
from :mod:`dpsynth.stream.ticks`); under replacement also after every ``release_every`` valid
records (:meth:`Engine.until_release` tells the processor where to cut a batch, without knowing
the engine); under add/remove never by count — records only join the open step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import encode_release
from dpsynth.schema import Schema
from dpsynth.stream.codecs import BatchResult, split_batch
from dpsynth.stream.settings import WorkerConfig
from dpsynth.stream.tabular_engine import open_tabular_engine, tabular_public_config


class Engine(Protocol):
    """One partition's synthesizer as the commit protocol drives it."""

    release_every: int

    @property
    def t(self) -> int:
        """Valid records fed so far (restored with the state)."""

    @property
    def sequence(self) -> int:
        """Releases made so far."""

    def split(self, values: Sequence[bytes | None]) -> BatchResult:
        """Decode raw messages: valid rows in order, rejects with reasons (never values)."""

    def extend(self, rows: np.ndarray) -> list[Any]:
        """Feed valid rows; return the releases completed (in order; none under add/remove)."""

    def tick(self) -> list[Any]:
        """A tick marker: the release it makes (none under replacement if nothing is new)."""

    def until_release(self) -> int | None:
        """Valid records until the next release by count; None when releases come only at
        tick markers (add/remove)."""

    def snapshot(self) -> bytes:
        """The state, restorable with the same key (true counts: protect it)."""

    def encode(
        self, release: Any, *, run_id: str, partition: int, max_chunk_bytes: int
    ) -> tuple[int, list[bytes]]:
        """``(sequence, records)`` of one release for the output topic."""


class PointEngine:
    """The point engine: :class:`OnlineSynthesizer` fed with schema-checked points."""

    def __init__(self, synth: OnlineSynthesizer, schema: Schema) -> None:
        self.synth = synth
        self.schema = schema
        self.release_every = synth.release_every

    @property
    def t(self) -> int:
        """Valid records fed so far."""
        return self.synth.t

    @property
    def sequence(self) -> int:
        """Releases made so far."""
        return self.synth.sequence

    def split(self, values: Sequence[bytes | None]) -> BatchResult:
        """Schema check of every record of the batch (clipping counted, NaN rejected)."""
        return split_batch(self.schema, values)

    def extend(self, rows: np.ndarray) -> list[Any]:
        """Feed points (n×d): a release every ``release_every`` records under replacement;
        under add/remove the points join the open step (privacy: P11)."""
        if self.synth.neighbours == "add_remove":
            self.synth.add(rows)
            return []
        return list(self.synth.extend(rows))

    def tick(self) -> list[Any]:
        """A tick marker (:meth:`OnlineSynthesizer.tick`)."""
        release = self.synth.tick()
        return [] if release is None else [release]

    def until_release(self) -> int | None:
        """Records until the next count-defined release (None under add/remove)."""
        if self.synth.neighbours == "add_remove":
            return None
        return self.release_every - self.synth.open_records

    def snapshot(self) -> bytes:
        """The synthesizer's snapshot."""
        return self.synth.snapshot()

    def encode(
        self, release: Any, *, run_id: str, partition: int, max_chunk_bytes: int
    ) -> tuple[int, list[bytes]]:
        """Release format 1 records (:mod:`dpsynth.release.points_v1`)."""
        sequence = int(release.metadata["sequence"])
        return sequence, encode_release(
            release, run_id=run_id, partition=partition, sequence=sequence,
            max_chunk_bytes=max_chunk_bytes,
        )


def open_engine(config: WorkerConfig, partition: int, snapshot: bytes | None) -> Engine:
    """A new engine for ``partition`` (``snapshot`` None) or the one restored from a snapshot.

    The caller has checked that the stored state was built with this configuration.
    """
    key = config.noise_key.reveal()
    if config.engine == "tabular":
        return open_tabular_engine(config, partition, snapshot)
    assert config.schema is not None  # load_config requires it for the point engine
    if snapshot is None:
        synth = config.synthesizer(config.d, key, partition=partition)
    else:
        synth = OnlineSynthesizer.restore(snapshot, key)
    return PointEngine(synth, config.schema)


def synthesizer_config(config: WorkerConfig) -> dict[str, Any]:
    """The public parameters a partition's state is bound to (checked at every load)."""
    bound = {
        "d": config.d,
        "epsilon": config.epsilon,
        "release_every": config.release_every,
        "max_depth": config.max_depth,
        "schedule": config.mechanism,  # the key of states written before 0.2
        "key_fingerprint": config.noise_key.fingerprint,
        "schema": config.schema.to_dict(),
    }
    if config.neighbours != "replace":  # absent for replace: older states still load
        bound["neighbours"] = config.neighbours
    return bound


#: The variable that sets each key of :func:`synthesizer_config` (for the mismatch error).
CONFIG_VARIABLES = {
    "d": "DPSYNTH_SCHEMA_FILE",
    "schema": "DPSYNTH_SCHEMA_FILE",
    "epsilon": "DPSYNTH_EPSILON",
    "release_every": "DPSYNTH_RELEASE_EVERY",
    "max_depth": "DPSYNTH_MAX_DEPTH",
    "schedule": "DPSYNTH_MECHANISM",
    "neighbours": "DPSYNTH_NEIGHBOURS",
    "key_fingerprint": "DPSYNTH_NOISE_KEY (fingerprint)",
}


def public_config(config: WorkerConfig) -> dict[str, Any]:
    """The public parameters of the configured engine (a stored state must match them)."""
    if config.engine == "tabular":
        return tabular_public_config(config)
    return synthesizer_config(config)
