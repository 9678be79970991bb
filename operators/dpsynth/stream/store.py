"""State of one input partition in RocksDB: chunked snapshot + watermark, committed atomically.

Layer: adapter. One RocksDB database per input partition (``<data dir>/state/p<partition>``),
opened through ``rocksdict`` (the RocksDB binding Faust itself uses) with a small block cache and
write buffer: Faust's default of a 2 GiB block cache per table and partition is far too much
for a database that holds one snapshot.

Layout (format 2; format 1, without deltas, is still read):

- ``chunk/<index>`` (index as 8 bytes big-endian): the **base** snapshot cut into fixed-size
  chunks of ``chunk_bytes``;
- ``delta/<number>`` (8 bytes big-endian): the **deltas** since the base
  (:mod:`dpsynth.state_delta`, :mod:`dpsynth.stream.statelog`): a commit usually writes one
  delta, whose size follows what the commit's records changed, and sometimes a new base;
- ``manifest``: msgpack ``{format, run_id, partition, watermark, t, sequence, last_tick_ms,
  length, chunk_bytes, chunks: [BLAKE2b-256 of each chunk], config, committed_at, epoch,
  base_seq, sizes, deltas, digest}``: the base is the snapshot after delta ``base_seq`` of
  epoch ``epoch``; ``sizes`` the bytes of every delta of the epoch (1…), ``deltas`` the hashes
  of the ones stored here (``base_seq`` + 1 …); ``digest`` the SHA-256 of the snapshot now
  (``last_tick_ms``: the period of the last tick marker applied, −1 for none; absent in stores
  written before issue 13); ``latest_records``: how many records the release in the
  partition's latest view has (its positions beyond a shorter release get tombstones; absent:
  0);
- ``user/<16 bytes>`` (privacy unit "user" only, docs/privacy.md P15): one entry per user of
  the partition (:mod:`dpsynth.stream.usercodec`: 2 or 12 bytes under the user's keyed hash).
  About 30 bytes per user on disk (docs/benchmarks.md, "Privacy unit user").

:meth:`PartitionStore.commit` writes a delta and the new manifest, or a new base — compared
with the previous base chunk by chunk (a memcmp is ~10× cheaper than hashing), only the chunks
that changed are hashed and written, chunks past a shrunken end and the old deltas deleted —
in one ``WriteBatch``: RocksDB applies a batch atomically, so after any crash the database holds
either the previous commit or the new one, never a mix (docs/design.md D12: a tick is
applied atomically); the per-user counts that changed go into the same batch, so after a crash no
user's stored count is ahead of, or behind, the watermark, and no user can exceed k (P15).
:meth:`PartitionStore.load` re-checks every chunk and delta hash and the length, applies the
deltas and checks the result's SHA-256 against the manifest (checked again by the
synthesizer's restore), and raises :class:`~dpsynth.errors.StateCorruptError` with the
operator's fix on any mismatch.

The snapshot and the user entries hold raw data — the open step's records at the tree's
resolution, exact counts, each user's exact count under its keyed hash: the data directory needs
the protection of the raw-events topic.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     store = PartitionStore(Path(tmp) / "p0", partition=0, run_id="doc", chunk_bytes=4096)
...     stats = store.commit(b"a" * 10_000, watermark=41, t=100, sequence=1, config={})
...     again = store.commit(b"a" * 4096 + b"b" * 5904, watermark=57, t=150, sequence=1, config={})
...     state = store.load()
...     store.close()
>>> stats.chunks_written, again.chunks_written, state.watermark, len(state.snapshot)
(3, 2, 57, 10000)
"""

from __future__ import annotations

import hmac
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import rocksdict

from dpsynth.bounding import UserCounts, UserKeys
from dpsynth.errors import ConfigError, StateCorruptError
from dpsynth.state_delta import snapshot_digest
from dpsynth.stream.rocks import chunk_hash, diff_chunks, rocksdb_options
from dpsynth.stream.statelog import StateCommit, rebuild
from dpsynth.stream.usercodec import decode_users, encode_users, hashes_of, user_keys

STORE_FORMAT = 2
_READ_FORMATS = (1, 2)
_MANIFEST = b"manifest"
_CHUNK = b"chunk/"
_DELTA = b"delta/"
_USER = b"user/"


def _chunk_key(index: int) -> bytes:
    return _CHUNK + index.to_bytes(8, "big")


def _delta_key(number: int) -> bytes:
    return _DELTA + number.to_bytes(8, "big")


@dataclass(frozen=True)
class StoredState:
    """What :meth:`PartitionStore.load` returns: the verified snapshot and its watermark."""

    snapshot: bytes
    watermark: int  # last input offset whose records are inside the snapshot
    t: int
    sequence: int
    config: dict[str, Any]
    last_tick_ms: int = -1  # period start of the last tick marker applied (-1: none)
    latest_records: int = 0  # records of the release in the latest view
    epoch: int = 0  # the base + deltas position (dpsynth.stream.statelog)
    sizes: tuple[int, ...] = ()  # bytes of every delta of the epoch

@dataclass(frozen=True)
class CommitStats:
    """What one commit wrote."""

    chunks_total: int
    chunks_written: int
    bytes_written: int
    snapshot_bytes: int
    seconds: float


class PartitionStore:
    """The RocksDB database of one input partition.

    Parameters
    ----------
    path
        Directory of the database (created if missing).
    partition, run_id
        Identity checked against the manifest: a store of another run or partition is refused.
    chunk_bytes
        Size of a snapshot chunk (default 256 KiB).
    block_cache_bytes, write_buffer_bytes
        RocksDB memory (defaults 8 MiB and 4 MiB; Faust's are 2 GiB and 64 MiB × 3).
    sync
        fsync the write-ahead log at every commit (survives power loss, not only a crash).
    """

    def __init__(
        self,
        path: Path,
        *,
        partition: int,
        run_id: str,
        chunk_bytes: int = 256 * 1024,
        block_cache_bytes: int = 8 * 2**20,
        write_buffer_bytes: int = 4 * 2**20,
        sync: bool = True,
    ) -> None:
        if chunk_bytes < 1:
            raise ConfigError(f"chunk_bytes ({chunk_bytes}) must be >= 1")
        self.path = Path(path)
        self.partition = int(partition)
        self.run_id = run_id
        self.chunk_bytes = int(chunk_bytes)
        self.path.mkdir(parents=True, exist_ok=True)
        options = rocksdb_options(block_cache_bytes, write_buffer_bytes)
        try:
            self._db = rocksdict.Rdict(str(self.path), options)
        except Exception as e:  # rocksdict raises plain Exception with RocksDB's message
            if "lock" in str(e).lower():
                raise ConfigError(
                    f"state database {self.path} is locked by another process: two workers "
                    "share DPSYNTH_DATA_DIR; give every worker its own data directory"
                ) from None
            raise
        self._write_options = rocksdict.WriteOptions()
        self._write_options.sync = bool(sync)
        self._hashes: list[bytes] = []  # chunk hashes of the last commit (what is on disk)
        self._previous: bytes = b""  # the last committed snapshot (for the chunk comparison)
        self._hash_chunk_bytes = self.chunk_bytes
        self._manifest: dict[str, Any] | None = None

    # -- reading -----------------------------------------------------------------------------

    def manifest(self) -> dict[str, Any] | None:
        """The last committed manifest, or None for an empty store (checked, not the chunks)."""
        raw = self._db.get(_MANIFEST)
        if raw is None:
            return None
        try:
            manifest = msgpack.unpackb(raw, raw=False)
        except Exception:  # noqa: BLE001 - any decoding failure is corruption
            raise self._corrupt("the manifest cannot be decoded") from None
        if not isinstance(manifest, dict) or manifest.get("format") not in _READ_FORMATS:
            raise self._corrupt(f"the manifest is not of store format {STORE_FORMAT}")
        if manifest.get("run_id") != self.run_id or manifest.get("partition") != self.partition:
            raise ConfigError(
                f"state database {self.path} belongs to run {manifest.get('run_id')!r} "
                f"partition {manifest.get('partition')}, not run {self.run_id!r} partition "
                f"{self.partition}: point DPSYNTH_DATA_DIR at this run's directory, or at an "
                "empty one to rebuild the state by replay"
            )
        return manifest

    def load(self) -> StoredState | None:
        """The verified snapshot and watermark, or None when nothing was ever committed."""
        manifest = self.manifest()
        if manifest is None:
            return None
        hashes = manifest["chunks"]
        chunk_bytes = int(manifest["chunk_bytes"])
        parts = []
        for index, expected in enumerate(hashes):
            chunk = self._db.get(_chunk_key(index))
            if chunk is None:
                raise self._corrupt(f"chunk {index} of {len(hashes)} is missing")
            if not hmac.compare_digest(chunk_hash(chunk), expected):
                raise self._corrupt(f"chunk {index} of {len(hashes)} fails its hash check")
            parts.append(chunk)
        base = b"".join(parts)
        if len(base) != manifest["length"]:
            raise self._corrupt("the reassembled snapshot has the wrong length")
        self._hashes = list(hashes)
        self._previous = base
        self._hash_chunk_bytes = chunk_bytes
        self._manifest = manifest
        return StoredState(
            snapshot=self._with_deltas(base, manifest),
            watermark=int(manifest["watermark"]),
            t=int(manifest["t"]),
            sequence=int(manifest["sequence"]),
            config=dict(manifest.get("config") or {}),
            last_tick_ms=int(manifest.get("last_tick_ms", -1)),
            latest_records=int(manifest.get("latest_records", 0)),
            epoch=int(manifest.get("epoch", 0)),
            sizes=tuple(int(n) for n in manifest.get("sizes", ())),
        )

    def _with_deltas(self, base: bytes, manifest: dict[str, Any]) -> bytes:
        """The base with the stored deltas applied, checked against the manifest's digest."""
        hashes = manifest.get("deltas") or []
        first = int(manifest.get("base_seq", 0)) + 1
        blobs = []
        for number, expected in enumerate(hashes, start=first):
            blob = self._db.get(_delta_key(number))
            if blob is None or not hmac.compare_digest(chunk_hash(blob), expected):
                raise self._corrupt(f"delta {number} is missing or fails its hash check")
            blobs.append(blob)
        try:
            return rebuild(base, blobs, bytes(manifest.get("digest") or snapshot_digest(base)))
        except StateCorruptError as e:
            raise self._corrupt(str(e)) from None

    def _corrupt(self, what: str) -> StateCorruptError:
        return StateCorruptError(
            f"state of partition {self.partition} in {self.path} is corrupt: {what}. Stop the "
            "worker and delete that directory; on restart the worker rebuilds the partition by "
            "replaying its input from offset 0 with the same key (releases come out identical)"
        )

    # -- writing -----------------------------------------------------------------------------

    def commit(
        self,
        snapshot: bytes,
        *,
        watermark: int,
        t: int,
        sequence: int,
        config: dict[str, Any],
        last_tick_ms: int = -1,
        users: UserCounts | None = None,
        latest_records: int = 0,
        state: StateCommit | None = None,
    ) -> CommitStats:
        """Write the commit and the manifest in one atomic ``WriteBatch``.

        ``state`` (:class:`~dpsynth.stream.statelog.StateCommit`): a delta, or a new base; None
        writes ``snapshot`` as a base of its own. ``watermark`` is the last input offset whose
        records (and tick markers) are inside ``snapshot``; ``last_tick_ms`` the period of the
        last tick marker applied; ``users`` the per-user counts that changed since the last
        commit (privacy: P15, same batch).
        """
        start = time.perf_counter()
        batch = rocksdict.WriteBatch(raw_mode=True)
        previous = self._manifest or {}
        base: dict[str, Any] = {k: previous[k] for k in ("length", "chunk_bytes", "chunks")
                                if k in previous}
        deltas: list[bytes] = list(previous.get("deltas") or [])
        if state is not None and state.delta is not None:
            if not base:
                raise ValueError("a delta needs a base in the store first")
            batch.put(_delta_key(state.seq), state.delta)
            deltas.append(chunk_hash(state.delta))
            nbytes, written = len(state.delta), 0
            sizes = [*previous.get("sizes", ()), len(state.delta)]
            base_seq = int(previous.get("base_seq", 0))
        else:
            nbytes, written = self._put_base(batch, snapshot)
            base = {"length": len(snapshot), "chunk_bytes": self.chunk_bytes,
                    "chunks": self._hashes}
            first = int(previous.get("base_seq", 0)) + 1
            for number in range(first, first + len(deltas)):
                batch.delete(_delta_key(number))
            deltas, sizes = [], [] if state is None else list(state.sizes)
            base_seq = 0 if state is None else state.seq
        if users is not None and len(users):
            nbytes += _put_users(batch, users)  # privacy: P15 (atomic with the watermark)
        manifest: dict[str, Any] = {
            "format": STORE_FORMAT, "run_id": self.run_id, "partition": self.partition,
            "watermark": int(watermark), "t": int(t), "sequence": int(sequence),
            "last_tick_ms": int(last_tick_ms), "latest_records": int(latest_records),
            **base, "config": config, "committed_at": time.time(),
            "epoch": 0 if state is None else state.epoch, "base_seq": base_seq,
            "sizes": sizes, "deltas": deltas, "digest": snapshot_digest(snapshot),
        }
        raw_manifest = msgpack.packb(manifest, use_bin_type=True)
        batch.put(_MANIFEST, raw_manifest)
        self._db.write(batch, self._write_options)  # atomic: all of it or nothing
        self._manifest = manifest
        return CommitStats(
            chunks_total=len(base["chunks"]),
            chunks_written=written,
            bytes_written=nbytes + len(raw_manifest),
            snapshot_bytes=len(snapshot),
            seconds=time.perf_counter() - start,
        )

    def _put_base(self, batch: rocksdict.WriteBatch, snapshot: bytes) -> tuple[int, int]:
        """Queue the chunks of ``snapshot`` that differ from the stored base (and delete chunks
        past its end); returns (bytes, chunks) queued."""
        step = self.chunk_bytes
        same_layout = self._hash_chunk_bytes == step
        hashes, changed = diff_chunks(
            snapshot, self._previous if same_layout else b"",
            self._hashes if same_layout else [], step,
        )
        nbytes = 0
        for index in changed:
            chunk = snapshot[index * step:(index + 1) * step]
            batch.put(_chunk_key(index), chunk)
            nbytes += len(chunk)
        for index in range(len(hashes), len(self._hashes)):
            batch.delete(_chunk_key(index))
        self._hashes, self._hash_chunk_bytes = hashes, step
        self._previous = bytes(snapshot)
        return nbytes, len(changed)

    def load_users(self, limit: int) -> UserCounts | None:
        """Every stored user's counts, or None when there are more than ``limit`` (then the
        bounds read users one batch at a time, :meth:`read_users`)."""
        keys: list[bytes] = []
        values: list[bytes] = []
        iterator = self._db.iter()
        iterator.seek(_USER)
        while iterator.valid() and iterator.key().startswith(_USER):
            if len(keys) == limit:
                return None
            keys.append(iterator.key()[len(_USER):])
            values.append(iterator.value())
            iterator.next()
        return self._parse_users(hashes_of(keys), list(range(len(keys))), values)

    def read_users(self, keys: UserKeys) -> UserCounts:
        """The stored counts of ``keys`` (count 0: not stored): the contribution bounds'
        resolver (:class:`~dpsynth.bounding.ContributionBounds`). One multi-get."""
        # a multi-get: a list of keys gives a list of values (rocksdict's stub has one signature)
        raw: list[bytes | None] = self._db[user_keys(keys, _USER)]  # type: ignore[index, assignment]
        found = [i for i, value in enumerate(raw) if value is not None]
        return self._parse_users(keys, found, [value for value in raw if value is not None])

    def _parse_users(self, keys: UserKeys, found: list[int], raw: list[bytes]) -> UserCounts:
        """UserCounts of ``keys`` from the stored values of those at ``found``."""
        try:
            return decode_users(keys, found, raw)
        except ValueError as e:
            raise self._corrupt(str(e)) from None

    def close(self) -> None:
        """Close the database (idempotent); committed batches are already in its log."""
        db = getattr(self, "_db", None)
        self._db = None  # type: ignore[assignment]  # closed: no method runs after close()
        if db is not None:
            db.close()

    def __enter__(self) -> PartitionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _put_users(batch: rocksdict.WriteBatch, users: UserCounts) -> int:
    """Queue one entry per user in ``batch``; returns the bytes queued."""
    entries = encode_users(users)
    for key, value in entries:
        batch.put(_USER + key, value)
    return sum(len(_USER) + len(k) + len(v) for k, v in entries)
