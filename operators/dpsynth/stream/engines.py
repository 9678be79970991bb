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

Privacy unit "user" (docs/privacy.md P15, point engine only): :meth:`Engine.split` also checks
each message's key (:mod:`dpsynth.stream.routing`) and returns each valid row's user; the
per-user counts live in the partition's store, not in the snapshot: :meth:`Engine.take_user_changes`
hands the changed ones to the commit, which writes them in the same atomic batch.

Time (docs/privacy.md P11): both release at every public tick marker (:meth:`Engine.tick`,
from :mod:`dpsynth.stream.ticks`); under replacement also after every ``release_every`` valid
records (:meth:`Engine.until_release` tells the processor where to cut a batch, without knowing
the engine); under add/remove never by count — records only join the open step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from dpsynth.bounding import UserCounts, UserKeys
from dpsynth.errors import ConfigError
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import encode_release
from dpsynth.schema import Schema
from dpsynth.stream.codecs import BatchResult, split_batch
from dpsynth.stream.routing import USER_CONFIG_VARIABLES, UserRouting, user_bound_config
from dpsynth.stream.settings import WorkerConfig
from dpsynth.stream.tabular_engine import open_tabular_engine, tabular_public_config


class UserStore(Protocol):
    """Where a partition's per-user counts are kept (:class:`~dpsynth.stream.store
    .PartitionStore`)."""

    def read_users(self, keys: UserKeys) -> UserCounts:
        """The stored counts of ``keys`` (0: not stored)."""

    def load_users(self, limit: int) -> UserCounts | None:
        """Every stored user, or None when there are more than ``limit``."""


class Engine(Protocol):
    """One partition's synthesizer as the commit protocol drives it."""

    release_every: int

    @property
    def t(self) -> int:
        """Valid records fed so far (restored with the state)."""

    @property
    def sequence(self) -> int:
        """Releases made so far."""

    @property
    def dropped(self) -> int:
        """Valid records over their user's bound, not counted (privacy unit "user")."""

    def split(self, values: Sequence[bytes | None],
              keys: Sequence[bytes | None] | None = None) -> BatchResult:
        """Decode raw messages (``keys``: their Kafka keys): valid rows in order, rejects with
        reasons (never values)."""

    def extend(self, rows: np.ndarray, users: Sequence[bytes] | None = None) -> list[Any]:
        """Feed valid rows (and their users); return the releases completed (in order; none
        under add/remove)."""

    def take_user_changes(self) -> UserCounts | None:
        """Per-user counts changed since the last commit (None: privacy unit "record")."""

    def committed(self) -> None:
        """The commit that wrote :meth:`take_user_changes` is durable (caches may shrink)."""

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
    """The point engine: :class:`OnlineSynthesizer` fed with schema-checked points.

    Under the privacy unit "user", ``routing`` checks each message's key and ``cache_users``
    bounds the users kept in memory between commits (the rest are read back from the store
    through the bounds' resolver).
    """

    def __init__(self, synth: OnlineSynthesizer, schema: Schema,
                 routing: UserRouting | None = None, cache_users: int = 0) -> None:
        self.synth = synth
        self.schema = schema
        self.routing = routing
        self.cache_users = cache_users
        self.release_every = synth.release_every

    @property
    def t(self) -> int:
        """Valid records fed so far."""
        return self.synth.t

    @property
    def sequence(self) -> int:
        """Releases made so far."""
        return self.synth.sequence

    @property
    def dropped(self) -> int:
        """Valid records over their user's bound (an operator metric)."""
        return self.synth.dropped

    def split(self, values: Sequence[bytes | None],
              keys: Sequence[bytes | None] | None = None) -> BatchResult:
        """Schema check of every record of the batch (clipping counted, NaN rejected), and
        under the privacy unit "user" the key check of every message (P15)."""
        if self.routing is None:
            return split_batch(self.schema, values)
        return self.routing.split(self.schema, values,
                                  [None] * len(values) if keys is None else keys)

    def extend(self, rows: np.ndarray, users: Sequence[bytes] | None = None) -> list[Any]:
        """Feed points (n×d): a release every ``release_every`` records under replacement;
        under add/remove the points join the open step (privacy: P11)."""
        if self.synth.neighbours == "add_remove":
            self.synth.add(rows, users=users)
            return []
        return list(self.synth.extend(rows, users=users))

    def take_user_changes(self) -> UserCounts | None:
        """The users whose counts changed since the last call (marked clean)."""
        return None if self.synth.users is None else self.synth.users.bounds.take_changes()

    def committed(self) -> None:
        """Forget the cached users once more than ``cache_users`` are held (all are stored)."""
        if self.synth.users is not None and self.synth.users.bounds.users > self.cache_users:
            self.synth.users.bounds.evict()

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
        """The synthesizer's snapshot, without per-user counts (stored apart, P15)."""
        return self.synth.snapshot(include_users=False)

    def encode(
        self, release: Any, *, run_id: str, partition: int, max_chunk_bytes: int
    ) -> tuple[int, list[bytes]]:
        """Release format 1 records (:mod:`dpsynth.release.points_v1`)."""
        sequence = int(release.metadata["sequence"])
        return sequence, encode_release(
            release, run_id=run_id, partition=partition, sequence=sequence,
            max_chunk_bytes=max_chunk_bytes,
        )


def open_engine(config: WorkerConfig, partition: int, snapshot: bytes | None,
                users: UserStore | None = None) -> Engine:
    """A new engine for ``partition`` (``snapshot`` None) or the one restored from a snapshot.

    The caller has checked that the stored state was built with this configuration. ``users``
    holds the per-user counts (the partition's store) under the privacy unit "user": all of
    them are loaded now if at most ``DPSYNTH_USER_CACHE_ENTRIES``, else read as needed.
    """
    key = config.noise_key.reveal()
    if config.engine == "tabular":
        return open_tabular_engine(config, partition, snapshot)
    assert config.schema is not None  # load_config requires it for the point engine
    if snapshot is None:
        synth = config.synthesizer(config.d, key, partition=partition)
    else:
        synth = OnlineSynthesizer.restore(snapshot, key)
    if synth.users is None:
        return PointEngine(synth, config.schema)
    if users is not None:
        synth.users.bounds.resolver = users.read_users
        synth.users.bounds.preload(users.load_users(config.user_cache_entries))
    if config.input_partitions < 1:
        raise ConfigError("the input topic's partition count is unknown under "
                          "DPSYNTH_PRIVACY_UNIT=user: set DPSYNTH_INPUT_PARTITIONS (the worker "
                          "reads it from the broker at start)")
    routing = UserRouting(partition, config.input_partitions, config.schema.user_column)
    return PointEngine(synth, config.schema, routing, config.user_cache_entries)


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
    bound.update(user_bound_config(config))  # privacy: P15 (the unit; users' partitions)
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
    **USER_CONFIG_VARIABLES,
}


def public_config(config: WorkerConfig) -> dict[str, Any]:
    """The public parameters of the configured engine (a stored state must match them)."""
    if config.engine == "tabular":
        return tabular_public_config(config)
    return synthesizer_config(config)
