"""The tabular engine of the worker (``DPSYNTH_ENGINE=tabular``): paper 003 per partition.

Layer: adapter. Everything the worker needs to run :class:`~dpsynth.tabular.synthesizer.
TabularSynthesizer` (Kumar, Strohmer, Vershynin: select-measure-fit over a finite domain, Alg 3,
or the StreamingMWEM baseline, Alg 2) under the same commit protocol as the point synthesizer:

- :class:`TabularSettings` and :func:`read_tabular_settings`: ``DPSYNTH_DOMAIN_FILE`` (required),
  ``DPSYNTH_TABULAR_METHOD``, ``DPSYNTH_TABULAR_COUNTER``, ``DPSYNTH_TABULAR_WORKLOADS_PER_STEP``;
- :func:`tabular_public_config`: the public parameters a partition's state is bound to;
- :class:`TabularEngine`: records are encoded by the domain (a record outside it is
  dead-lettered with a reason naming the attribute, never the value), one time step of the
  paper completes every ``DPSYNTH_RELEASE_EVERY`` valid records, and a release is written in
  format ``tabular.v1`` (:mod:`~dpsynth.release.tabular_v1`) under the key
  ``run/partition/sequence``.

Privacy (paper 003 Thm 6.1): each partition's synthesizer is ε-DP for its own input stream under
event-level neighbours (one record added or removed at one step); partitions hold disjoint
records, so the run is ε-DP by parallel composition. The input partition enters every noise
context, so two partitions never share noise.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpsynth.errors import ConfigError, StateCorruptError
from dpsynth.release import encode_tabular_release
from dpsynth.schema import ClipReport
from dpsynth.stream.codecs import BatchResult, split_messages
from dpsynth.tabular.counters import COUNTERS
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.synthesizer import METHODS, TabularSynthesizer

if TYPE_CHECKING:
    from dpsynth.stream.settings import WorkerConfig

#: The variable that sets each key of :func:`tabular_public_config` (for the mismatch error).
TABULAR_VARIABLES = {
    "engine": "DPSYNTH_ENGINE",
    "domain": "DPSYNTH_DOMAIN_FILE",
    "epsilon": "DPSYNTH_EPSILON",
    "release_every": "DPSYNTH_RELEASE_EVERY",
    "method": "DPSYNTH_TABULAR_METHOD",
    "counter": "DPSYNTH_TABULAR_COUNTER",
    "workloads_per_step": "DPSYNTH_TABULAR_WORKLOADS_PER_STEP",
    "key_fingerprint": "DPSYNTH_NOISE_KEY (fingerprint)",
    "synthesizer": "the tabular synthesizer's parameters (DPSYNTH_NEIGHBOURS, or another "
                   "dpsynth version?)",
}


@dataclass(frozen=True)
class TabularSettings:
    """The tabular engine's part of the configuration (``DPSYNTH_ENGINE=tabular``)."""

    domain_file: str
    domain: Domain
    method: str
    counter: str
    workloads_per_step: int

    def summary(self) -> dict[str, Any]:
        """Loggable form (the domain by file, attribute count and digest)."""
        return {
            "domain_file": self.domain_file, "attributes": len(self.domain.attributes),
            "domain_digest": self.domain.digest(), "method": self.method,
            "counter": self.counter, "workloads_per_step": self.workloads_per_step,
        }


def _default(name: str) -> Any:
    return inspect.signature(TabularSynthesizer).parameters[name].default


def read_tabular_settings(r: Any) -> TabularSettings:
    """Read and check the tabular variables through ``config._Reader`` ``r``."""
    domain_file = r.required(
        "DPSYNTH_DOMAIN_FILE",
        "DPSYNTH_ENGINE=tabular needs the finite domain of the records: point it at a domain "
        "JSON file (format: schemas/domain.v1.json)",
    )
    if not Path(domain_file).is_file():
        raise ConfigError(
            f"DPSYNTH_DOMAIN_FILE ({domain_file!r}) is not a readable file; fix the path"
        )
    try:
        domain = Domain.from_json_file(domain_file)
    except ConfigError as e:
        raise ConfigError(f"DPSYNTH_DOMAIN_FILE ({domain_file!r}): {e}") from None
    method = r.raw("DPSYNTH_TABULAR_METHOD") or str(_default("method"))
    if method not in METHODS:
        raise ConfigError(
            f"DPSYNTH_TABULAR_METHOD ({method!r}) must be one of {list(METHODS)}"
        )
    counter = r.raw("DPSYNTH_TABULAR_COUNTER") or str(_default("counter"))
    if counter not in COUNTERS:
        raise ConfigError(
            f"DPSYNTH_TABULAR_COUNTER ({counter!r}) must be one of {list(COUNTERS)}"
        )
    workloads = r.integer(
        "DPSYNTH_TABULAR_WORKLOADS_PER_STEP", int(_default("workloads_per_step")), 1
    )
    return TabularSettings(domain_file, domain, method, counter, workloads)


def _settings(config: WorkerConfig) -> TabularSettings:
    if config.tabular is None:
        raise ConfigError("DPSYNTH_ENGINE=tabular needs DPSYNTH_DOMAIN_FILE; set it")
    return config.tabular


def new_tabular_synthesizer(
    config: WorkerConfig, partition: int, key: bytes | None = None
) -> TabularSynthesizer:
    """A fresh synthesizer of ``partition`` from the configuration (``key``: the run key)."""
    s = _settings(config)
    return TabularSynthesizer(
        s.domain, config.epsilon, config.noise_key.reveal() if key is None else key,
        release_every=config.release_every, method=s.method, counter=s.counter,
        workloads_per_step=s.workloads_per_step, partition=partition,
        neighbours=config.neighbours,
    )


def check_tabular(config: WorkerConfig) -> None:
    """Build a throwaway synthesizer so that bad ε or tabular settings fail at start."""
    try:
        new_tabular_synthesizer(config, 0, key=bytes(32))
    except ConfigError as e:
        raise ConfigError(
            "DPSYNTH_EPSILON / DPSYNTH_RELEASE_EVERY / DPSYNTH_DOMAIN_FILE / "
            f"DPSYNTH_TABULAR_*: {e}"
        ) from None


def tabular_public_config(config: WorkerConfig) -> dict[str, Any]:
    """The public parameters a tabular partition state is bound to (checked at every load)."""
    s = _settings(config)
    synth = new_tabular_synthesizer(config, 0, key=bytes(32))
    return {
        "engine": "tabular",
        "domain": s.domain.to_dict(),
        "epsilon": config.epsilon,
        "release_every": config.release_every,
        "method": s.method,
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

    def split(self, values: Sequence[bytes | None]) -> BatchResult:
        """Decode messages and encode their records by the domain (one call for the batch)."""
        names = self.domain.attributes
        p = len(names)

        def check(records: list[Any]) -> tuple[np.ndarray, ClipReport, list[tuple[int, str]]]:
            if not records:
                return np.zeros((0, p), np.int64), ClipReport(names, (0,) * p), []
            codes, reasons = self.domain.encode(records)
            bad = [(i, str(r)) for i, r in enumerate(reasons) if r is not None]
            return codes, ClipReport(names, (0,) * p), bad

        return split_messages(values, check)

    def extend(self, rows: np.ndarray) -> list[Any]:
        """Feed codes (n×p); a release each time a step completes."""
        return list(self.synth.extend(rows))

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
    s = _settings(config)
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
