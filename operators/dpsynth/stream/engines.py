"""One partition's synthesizer as :class:`~dpsynth.stream.processor.PartitionProcessor` drives it.

Layer: adapter. The commit protocol (skip, replay, decode, feed, produce, commit) does not depend
on what is synthesized: :class:`SynthesizerEngine` drives any synthesizer of the contract
(:class:`~dpsynth.contract.Synthesizer`) — the point synthesizer
(:class:`~dpsynth.online.synthesizer.OnlineSynthesizer`, records checked by the schema) or the
tabular one (:class:`~dpsynth.tabular.synthesizer.TabularSynthesizer`, records encoded by the
domain), chosen by ``DPSYNTH_ENGINE`` — with a *splitter*, how a batch of raw messages becomes
valid rows and rejects.

Privacy unit "user" (docs/privacy.md P15, point engine only): the splitter also checks each
message's key (:mod:`dpsynth.stream.routing`) and returns each valid row's user; the per-user
counts live in the partition's store, not in the snapshot: :meth:`SynthesizerEngine.
take_user_changes` hands the changed ones to the commit, which writes them in the same atomic
batch.

Time (docs/privacy.md P11): both release at every public tick marker (:meth:`~SynthesizerEngine.
tick`, from :mod:`dpsynth.stream.ticks`); under replacement also after every ``release_every``
valid records (:meth:`~SynthesizerEngine.until_release` tells the processor where to cut a
batch); under add/remove never by count — records only join the open step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from dpsynth.bounding import UserCounts, UserKeys
from dpsynth.contract import Synthesizer
from dpsynth.errors import ConfigError, StateCorruptError
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.params import PARAMS
from dpsynth.release import encode_any_release
from dpsynth.schema import ClipReport, Schema
from dpsynth.stream.codecs import BatchResult, split_batch, split_messages
from dpsynth.stream.routing import UserRouting, user_bound_config
from dpsynth.stream.settings import WorkerConfig
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.synthesizer import TabularSynthesizer

#: How a batch of raw messages (and their Kafka keys) becomes valid rows and rejects.
Splitter = Callable[[Sequence[bytes | None], Sequence[bytes | None]], BatchResult]


class UserStore(Protocol):
    """Where a partition's per-user counts are kept (:class:`~dpsynth.stream.store
    .PartitionStore`)."""

    def read_users(self, keys: UserKeys) -> UserCounts:
        """The stored counts of ``keys`` (0: not stored)."""

    def load_users(self, limit: int) -> UserCounts | None:
        """Every stored user, or None when there are more than ``limit``."""


class SynthesizerEngine:
    """A synthesizer of the contract and its splitter, as the commit protocol drives them.

    ``cache_users`` bounds the users kept in memory between commits under the privacy unit
    "user" (the rest are read back from the store through the bounds' resolver).
    """

    def __init__(self, synth: Synthesizer[Any], split: Splitter, cache_users: int = 0) -> None:
        self.synth = synth
        self._split = split
        self.cache_users = cache_users

    @property
    def t(self) -> int:
        """Valid records fed so far (restored with the state)."""
        return self.synth.records_fed

    @property
    def sequence(self) -> int:
        """Releases made so far."""
        return self.synth.sequence

    @property
    def dropped(self) -> int:
        """Valid records over their user's bound, not counted (an operator metric)."""
        return self.synth.dropped

    def split(self, values: Sequence[bytes | None],
              keys: Sequence[bytes | None] | None = None) -> BatchResult:
        """Decode raw messages (``keys``: their Kafka keys): valid rows in order, rejects with
        reasons (never values)."""
        return self._split(values, [None] * len(values) if keys is None else keys)

    def extend(self, rows: np.ndarray, users: Sequence[bytes] | None = None) -> list[Any]:
        """Feed valid rows (and their users): a release every ``release_every`` records under
        replacement; under add/remove the rows join the open step (privacy: P11)."""
        if self.synth.neighbours == "add_remove":
            self.synth.add(rows, users)
            return []
        return list(self.synth.extend(rows, users))

    def take_user_changes(self) -> UserCounts | None:
        """The users whose counts changed since the last call, marked clean (None: the
        privacy unit "record")."""
        return None if self.synth.users is None else self.synth.users.bounds.take_changes()

    def committed(self) -> None:
        """Forget the cached users once more than ``cache_users`` are held (all are stored)."""
        users = self.synth.users
        if users is not None and users.bounds.users > self.cache_users:
            users.bounds.evict()

    def tick(self) -> list[Any]:
        """A tick marker: the release it makes (none under replacement if nothing is new)."""
        release = self.synth.tick()
        return [] if release is None else [release]

    def until_release(self) -> int | None:
        """Records until the next release by count (None under add/remove)."""
        if self.synth.neighbours == "add_remove":
            return None
        return self.synth.records_until_step()

    @property
    def mid_step(self) -> bool:
        """Whether records of an open step (or any step, under add/remove) are held."""
        return self.synth.neighbours == "add_remove" or self.synth.open_records > 0

    def snapshot(self) -> bytes:
        """The synthesizer's snapshot; per-user counts are stored apart (P15)."""
        return self.synth.snapshot(include_users=False)

    def encode(
        self, release: Any, *, run_id: str, partition: int, max_chunk_bytes: int
    ) -> tuple[int, list[bytes]]:
        """``(sequence, records)`` of one release for the output topic."""
        return encode_any_release(release, run_id=run_id, partition=partition,
                                  max_chunk_bytes=max_chunk_bytes)


#: The engine the processor drives (one class: any synthesizer of the contract).
Engine = SynthesizerEngine


def point_splitter(schema: Schema, routing: UserRouting | None = None) -> Splitter:
    """Schema check of every record of a batch (clipping counted, NaN rejected); under the
    privacy unit "user" also the key check of every message (P15)."""
    if routing is None:
        return lambda values, keys: split_batch(schema, values)
    return lambda values, keys: routing.split(schema, values, keys)


def table_splitter(domain: Domain) -> Splitter:
    """Every record encoded by the domain (one call for the batch); keys are not read."""
    names = domain.attributes
    p = len(names)

    def check(records: list[Any], owner: list[int]
              ) -> tuple[np.ndarray, ClipReport, list[tuple[int, str]]]:
        if not records:
            return np.zeros((0, p), np.int64), ClipReport(names, (0,) * p), []
        codes, reasons = domain.encode(records)
        bad = [(i, str(r)) for i, r in enumerate(reasons) if r is not None]
        return codes, ClipReport(names, (0,) * p), bad

    return lambda values, keys: split_messages(values, check)


def open_engine(config: WorkerConfig, partition: int, snapshot: bytes | None,
                users: UserStore | None = None) -> SynthesizerEngine:
    """A new engine for ``partition`` (``snapshot`` None) or the one restored from a snapshot.

    The caller has checked that the stored state was built with this configuration. ``users``
    holds the per-user counts (the partition's store) under the privacy unit "user": all of
    them are loaded now if at most ``DPSYNTH_USER_CACHE_ENTRIES``, else read as needed.
    """
    key = config.noise_key.reveal()
    if config.tabular is not None:
        if snapshot is None:
            return SynthesizerEngine(config.tabular_synthesizer(partition),
                                     table_splitter(config.tabular.domain))
        tabular = TabularSynthesizer.restore(snapshot, key)
        if tabular.partition != partition:
            raise StateCorruptError(
                f"the tabular state in partition {partition}'s directory belongs to partition "
                f"{tabular.partition}: give every partition its own directory under "
                "DPSYNTH_DATA_DIR/state (do not copy state between partitions)"
            )
        return SynthesizerEngine(tabular, table_splitter(config.tabular.domain))
    assert config.schema is not None  # load_config requires it for the point engine
    if snapshot is None:
        synth = config.synthesizer(config.d, key, partition=partition)
    else:
        synth = OnlineSynthesizer.restore(snapshot, key)
    if synth.users is None:
        return SynthesizerEngine(synth, point_splitter(config.schema))
    if users is not None:
        synth.users.bounds.resolver = users.read_users
        synth.users.bounds.preload(users.load_users(config.user_cache_entries))
    if config.input_partitions < 1:
        raise ConfigError("the input topic's partition count is unknown under "
                          "DPSYNTH_PRIVACY_UNIT=user: set DPSYNTH_INPUT_PARTITIONS (the worker "
                          "reads it from the broker at start)")
    routing = UserRouting(partition, config.input_partitions, config.schema.user_column)
    return SynthesizerEngine(synth, point_splitter(config.schema, routing),
                             config.user_cache_entries)


def public_config(config: WorkerConfig) -> dict[str, Any]:
    """The public parameters a partition's state is bound to (checked at every load): the
    engine, the synthesizer's own (:meth:`~dpsynth.contract.Synthesizer.public_config`), the
    input's description, the key's fingerprint and, under the privacy unit "user", the input
    topic's partition count."""
    bound: dict[str, Any] = {"engine": config.engine}
    if config.tabular is not None:
        bound.update(config.tabular_config(0).public_config())
    else:
        assert config.schema is not None
        bound.update(config.synthesizer(config.d, bytes(32)).public_config())
        bound["schema"] = config.schema.to_dict()
    bound.update(user_bound_config(config))  # privacy: P15 (the unit; users' partitions)
    bound["key_fingerprint"] = config.noise_key.fingerprint
    return bound


#: Bound keys whose setting is not the parameter of the same name.
_BOUND_BY = {"d": "schema_file", "schema": "schema_file", "domain": "domain_file",
             "schedule": "mechanism", "method": "tabular_mechanism",
             "counter": "tabular_counter", "workloads_per_step": "tabular_workloads_per_step"}


def bound_variable(key: str) -> str:
    """The setting that decides a key of :func:`public_config` (for the mismatch error)."""
    if key == "key_fingerprint":
        return "DPSYNTH_NOISE_KEY (fingerprint)"
    if key == "input_partitions":
        return "the input topic's partition count"
    param = PARAMS.get(_BOUND_BY.get(key, key))
    if param is not None and "worker" in param.scopes:
        return param.env
    return f"the synthesizer parameter {key!r} (another dpsynth version?)"


def check_bound(config: WorkerConfig, bound: dict[str, Any], stored: dict[str, Any],
                partition: int, where: object) -> None:
    """Refuse a partition's stored state built with another engine or other parameters
    (``bound``: :func:`public_config` now; ``stored``: the state's), saying how to proceed."""
    stored_engine = stored.get("engine", "points")
    if stored_engine != config.engine:
        raise ConfigError(
            f"DPSYNTH_ENGINE ({config.engine}) differs from the engine partition {partition}'s "
            f"state in {where} was built with ({stored_engine}); set "
            f"DPSYNTH_ENGINE={stored_engine}, or start a new run (new DPSYNTH_RUN_ID and noise "
            "key, empty DPSYNTH_DATA_DIR)"
        )
    for name, value in bound.items():
        if stored.get(name) != value:
            raise ConfigError(
                f"{bound_variable(name)} differs from the one partition {partition}'s state in "
                f"{where} was built with ({name}); the parameters of a run cannot change. "
                "Restore the previous setting, or start a new run (new DPSYNTH_RUN_ID and noise "
                "key, empty DPSYNTH_DATA_DIR)"
            )
