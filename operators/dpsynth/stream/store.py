"""State of one input partition in RocksDB: chunked snapshot + watermark, committed atomically.

Layer: adapter. One RocksDB database per input partition (``<data dir>/state/p<partition>``),
opened through ``rocksdict`` (the RocksDB binding Faust itself uses) with a small block cache and
write buffer: Faust's default of a 2 GiB block cache per table and partition is far too much
for a database that holds one snapshot.

Layout (format 1):

- ``chunk/<index>`` (index as 8 bytes big-endian): the synthesizer snapshot cut into fixed-size
  chunks of ``chunk_bytes``;
- ``manifest``: msgpack ``{format, run_id, partition, watermark, t, sequence, last_tick_ms,
  length, chunk_bytes, chunks: [BLAKE2b-256 of each chunk], config, committed_at}``
  (``last_tick_ms``: the period of the last tick marker applied, −1 for none; absent in stores
  written before issue 13); ``latest_records``: how many records the release in the
  partition's latest view has (its positions beyond a shorter release get tombstones; absent:
  0);
- ``user/<16 bytes>`` (privacy unit "user" only, docs/privacy.md P15): one entry per user of
  the partition, keyed by the user's 128-bit keyed hash (:mod:`dpsynth.bounding.ids`: the ids
  cannot be read back without the run's key), valued by its counted records (uint16, and with
  a per-step cap the step of the latest one, int64, and its count in that step, uint16; little
  endian) — 2 or 12 bytes. About 30 bytes per user on disk (docs/benchmarks.md §16).

:meth:`PartitionStore.commit` compares the new snapshot with the last committed one chunk by
chunk (the previous bytes stay in memory: a memcmp is ~10× cheaper than hashing), hashes and
writes **only the chunks that changed** (and deletes chunks past a shrunken end) plus the new
manifest in one ``WriteBatch``: RocksDB
applies a batch atomically, so after any crash the database holds either the previous commit or
the new one, never a mix (DESIGN §3 "a tick is applied atomically"); the per-user counts that
changed go into the same batch, so after a crash no user's stored count is ahead of, or behind,
the watermark, and no user can exceed k (P15). :meth:`PartitionStore.load`
re-checks every chunk hash and the length (the snapshot carries its own SHA-256 inside, checked
again by the synthesizer's restore) and raises
:class:`~dpsynth.errors.StateCorruptError` with the operator's fix on any mismatch.

The snapshot holds true counts: the data directory needs the protection of the raw-events topic.

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

import hashlib
import hmac
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import rocksdict

from dpsynth.bounding import UserCounts, UserKeys
from dpsynth.errors import ConfigError, StateCorruptError

STORE_FORMAT = 1
_MANIFEST = b"manifest"
_CHUNK = b"chunk/"
_USER = b"user/"
#: Stored value of a user: its counted records; with a per-step cap also (step, step count).
_COUNT = np.dtype("<u2")
_STEPPED = np.dtype([("count", "<u2"), ("step", "<i8"), ("step_count", "<u2")])
#: Chunks at least this large live in RocksDB blob files: compactions then move 30-byte
#: references instead of rewriting every 256 KiB chunk again and again.
_MIN_BLOB_BYTES = 4096


def chunk_hash(data: bytes | memoryview) -> bytes:
    """BLAKE2b-256 of one chunk: an integrity check, about twice as fast as SHA-256 here."""
    return hashlib.blake2b(data, digest_size=32).digest()


def _chunk_key(index: int) -> bytes:
    return _CHUNK + index.to_bytes(8, "big")


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
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_write_buffer_size(int(write_buffer_bytes))
        options.set_max_write_buffer_number(2)
        options.set_max_open_files(64)
        table = rocksdict.BlockBasedOptions()
        table.set_block_cache(rocksdict.Cache(int(block_cache_bytes)))
        # the per-user counts (privacy unit "user") are mostly looked up for users never seen:
        # a bloom filter (10 bits a key, ~1 % false positives) answers those without a read
        table.set_bloom_filter(10, False)
        options.set_memtable_whole_key_filtering(True)
        options.set_memtable_prefix_bloom_ratio(0.1)
        options.set_block_based_table_factory(table)
        options.set_enable_blob_files(True)
        options.set_min_blob_size(_MIN_BLOB_BYTES)
        options.set_enable_blob_gc(True)
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
        if not isinstance(manifest, dict) or manifest.get("format") != STORE_FORMAT:
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
        snapshot = b"".join(parts)
        if len(snapshot) != manifest["length"]:
            raise self._corrupt("the reassembled snapshot has the wrong length")
        self._hashes = list(hashes)
        self._previous = snapshot
        self._hash_chunk_bytes = chunk_bytes
        self._manifest = manifest
        return StoredState(
            snapshot=snapshot,
            watermark=int(manifest["watermark"]),
            t=int(manifest["t"]),
            sequence=int(manifest["sequence"]),
            config=dict(manifest.get("config") or {}),
            last_tick_ms=int(manifest.get("last_tick_ms", -1)),
            latest_records=int(manifest.get("latest_records", 0)),
        )

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
    ) -> CommitStats:
        """Write the snapshot's changed chunks and the manifest in one atomic ``WriteBatch``.

        ``watermark`` is the last input offset whose records (and tick markers) are inside
        ``snapshot``; ``last_tick_ms`` the period of the last tick marker applied; ``users``
        the per-user counts that changed since the last commit (privacy: P15, same batch).
        """
        start = time.perf_counter()
        size, step = len(snapshot), self.chunk_bytes
        same_layout = self._hash_chunk_bytes == step
        hashes, changed = _diff_chunks(
            snapshot, self._previous if same_layout else b"",
            self._hashes if same_layout else [], step,
        )
        batch = rocksdict.WriteBatch(raw_mode=True)
        nbytes = 0
        for index in changed:
            chunk = snapshot[index * step:(index + 1) * step]
            batch.put(_chunk_key(index), chunk)
            nbytes += len(chunk)
        for index in range(len(hashes), len(self._hashes)):
            batch.delete(_chunk_key(index))
        if users is not None and len(users):
            nbytes += _put_users(batch, users)  # privacy: P15 (atomic with the watermark)
        manifest = {
            "format": STORE_FORMAT,
            "run_id": self.run_id,
            "partition": self.partition,
            "watermark": int(watermark),
            "t": int(t),
            "sequence": int(sequence),
            "last_tick_ms": int(last_tick_ms),
            "latest_records": int(latest_records),
            "length": size,
            "chunk_bytes": step,
            "chunks": hashes,
            "config": config,
            "committed_at": time.time(),
        }
        raw_manifest = msgpack.packb(manifest, use_bin_type=True)
        batch.put(_MANIFEST, raw_manifest)
        self._db.write(batch, self._write_options)  # atomic: all of it or nothing
        self._hashes, self._hash_chunk_bytes, self._manifest = hashes, step, manifest
        self._previous = bytes(snapshot)
        return CommitStats(
            chunks_total=len(hashes),
            chunks_written=len(changed),
            bytes_written=nbytes + len(raw_manifest),
            snapshot_bytes=size,
            seconds=time.perf_counter() - start,
        )

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
        hashes = np.frombuffer(b"".join(keys), ">u8").astype(np.uint64).reshape(-1, 2)
        return self._parse_users(hashes, list(range(len(keys))), values)

    def read_users(self, keys: UserKeys) -> UserCounts:
        """The stored counts of ``keys`` (count 0: not stored): the contribution bounds'
        resolver (:class:`~dpsynth.bounding.ContributionBounds`). One multi-get."""
        # a multi-get: a list of keys gives a list of values (rocksdict's stub has one signature)
        raw: list[bytes | None] = self._db[_user_keys(keys, _USER)]  # type: ignore[index, assignment]
        found = [i for i, value in enumerate(raw) if value is not None]
        return self._parse_users(keys, found, [value for value in raw if value is not None])

    def _parse_users(self, keys: UserKeys, found: list[int], raw: list[bytes]) -> UserCounts:
        """UserCounts of ``keys`` from the stored values of those at ``found``."""
        counts = np.zeros(len(keys), np.uint16)
        steps = np.full(len(keys), -1, np.int64)
        step_counts = np.zeros(len(keys), np.uint16)
        if not found:
            return UserCounts(keys, counts, steps, step_counts)
        values = b"".join(raw)
        if len(values) == len(found) * _COUNT.itemsize:
            counts[found] = np.frombuffer(values, _COUNT)
        elif len(values) == len(found) * _STEPPED.itemsize:
            stepped = np.frombuffer(values, _STEPPED)
            counts[found] = stepped["count"]
            steps[found], step_counts[found] = stepped["step"], stepped["step_count"]
        else:
            raise self._corrupt("a stored user count has the wrong length")
        return UserCounts(keys, counts, steps, step_counts)

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


def _user_keys(keys: UserKeys, prefix: bytes = b"") -> list[bytes]:
    """``prefix`` + the 16 bytes of every user hash (big-endian words)."""
    raw = np.ascontiguousarray(keys, dtype=">u8").tobytes()
    return [prefix + raw[i:i + 16] for i in range(0, len(raw), 16)]


def _put_users(batch: rocksdict.WriteBatch, users: UserCounts) -> int:
    """Queue one entry per user in ``batch``; returns the bytes queued."""
    if users.steps is None:
        values = users.counts.astype(_COUNT).tobytes()
        width = _COUNT.itemsize
    else:
        stepped = np.empty(len(users), _STEPPED)
        stepped["count"], stepped["step"] = users.counts, users.steps
        stepped["step_count"] = users.step_counts
        values, width = stepped.tobytes(), _STEPPED.itemsize
    put = batch.put
    for i, key in enumerate(_user_keys(users.keys, _USER)):
        put(key, values[i * width:(i + 1) * width])
    return len(users) * (len(_USER) + 16 + width)


def _diff_chunks(
    snapshot: bytes, previous: bytes, previous_hashes: Sequence[bytes], step: int
) -> tuple[list[bytes], list[int]]:
    """Hashes of every chunk of ``snapshot`` and the indices of the chunks that changed.

    A chunk equal (byte for byte) to the previous snapshot's chunk keeps its stored hash;
    only changed chunks are hashed.
    """
    hashes: list[bytes] = []
    changed: list[int] = []
    for index, offset in enumerate(range(0, len(snapshot), step)):
        chunk = snapshot[offset:offset + step]
        if index < len(previous_hashes) and previous[offset:offset + step] == chunk:
            hashes.append(previous_hashes[index])
        else:
            hashes.append(chunk_hash(chunk))
            changed.append(index)
    return hashes, changed
