"""Release wire format v1: a release as a header, bounded chunks and a checksummed end record.

Layer: core. docs/design.md D17. One :class:`~dpsynth.release.model.Release` becomes a sequence of
msgpack records (``schemas/release.v1.json``, ``schemas/README.md``), each at most
``max_chunk_bytes``:

1. a **header**: ``{"kind": "header", "format": 1, "run_id", "partition", "sequence", "t",
   "depth", "d", "metadata", "placement_seed", "n_chunks", "leaf_encoding": "sparse"}``;
2. ``n_chunks`` **chunks** ``{"kind": "chunk", "run_id", "partition", "sequence", "index",
   "cells", "counts"}``: the non-zero leaves in increasing Morton order, ``cells`` as
   little-endian uint32 (uint64 when depth > 32) and ``counts`` as little-endian int64 bytes;
3. an **end** record ``{"kind": "end", "run_id", "partition", "sequence", "n_chunks",
   "sha256"}``, the hex SHA-256 of the header bytes followed by every chunk's bytes in order.

Encoding is deterministic (fixed key order, metadata keys sorted recursively, tuples written as
lists): the same release gives byte-identical records, so a retried release is a duplicate that
consumers drop by (run_id, partition, sequence) — docs/design.md D12.
:func:`decode_release` checks everything and raises :class:`ReleaseIncompleteError` on any gap;
:class:`ReleaseAssembler` does the same for records of many releases interleaved, as a topic's
consumer sees them. Error messages name record positions, chunk indices, cells and t, never a
count (docs/design.md D18).

>>> import numpy as np
>>> from dpsynth.release.model import Release, check_release
>>> release = Release(t=3, depth=2, leaf_counts=np.array([2, 0, 1, 0]), metadata={"d": 2})
>>> records = encode_release(release, run_id="demo", partition=0, sequence=7)
>>> [len(r) > 0 for r in records], decode_release(records) == release
([True, True, True], True)
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpsynth.errors import ConfigError
from dpsynth.release.framing import (
    DEFAULT_MAX_CHUNK_BYTES,
    ReleaseIncompleteError,
    ReleaseKey,
    canonical,
    check_identity,
    check_keys,
    is_field_int,
    is_int,
    key_of,
    pack,
    pack_with_arrays,
    unpack,
)
from dpsynth.release.model import Release, occupied_leaves

#: Version of the record layout; a reader refuses any other.
FORMAT_VERSION = 1
#: The leaf encoding of format 1: non-zero leaves only, as (cells, counts) arrays.
LEAF_ENCODING = "sparse"
#: Deepest release decoded by default: 2^32 leaves are 32 GiB of int64 counts.
MAX_DECODE_DEPTH = 32
_MAX_TREE_DEPTH = 63
_COUNT_DTYPE = np.dtype("<i8")
_HEADER_KEYS = frozenset(
    (
        "kind",
        "format",
        "run_id",
        "partition",
        "sequence",
        "t",
        "depth",
        "d",
        "metadata",
        "placement_seed",
        "n_chunks",
        "leaf_encoding",
    )
)
_CHUNK_KEYS = frozenset(("kind", "run_id", "partition", "sequence", "index", "cells", "counts"))
_END_KEYS = frozenset(("kind", "run_id", "partition", "sequence", "n_chunks", "sha256"))


def _cell_dtype(depth: int) -> np.dtype:
    """Little-endian uint32 cells up to depth 32, uint64 beyond."""
    return np.dtype("<u4") if depth <= 32 else np.dtype("<u8")


# ---- writer ------------------------------------------------------------------------------


def encode_release(
    release: Release,
    *,
    run_id: str,
    partition: int,
    sequence: int,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> list[bytes]:
    """Encode a release as [header, chunk 0, …, chunk n−1, end] msgpack records.

    Parameters
    ----------
    release
        The release; its ``metadata`` must hold ``d`` and only msgpack-able values (str-keyed
        dicts, lists, tuples — written as lists —, str, bytes, int, float, bool, None).
    run_id, partition, sequence
        Identity of the release: the run, the input partition, the release sequence number.
    max_chunk_bytes
        Upper bound on the size of every record (default 256 000, well under Kafka's 1 MB).

    Returns
    -------
    list of bytes
        Byte-identical for equal releases and identity.

    Raises
    ------
    ConfigError
        If the identity or the release is invalid, or a record cannot fit ``max_chunk_bytes``.
    """
    check_identity(ReleaseKey(run_id, partition, sequence))
    partition, sequence = int(partition), int(sequence)
    cells, values, d = occupied_leaves(release)
    if not is_int(max_chunk_bytes) or max_chunk_bytes <= 0:
        raise ConfigError(f"max_chunk_bytes ({max_chunk_bytes!r}) must be an integer > 0")
    cell_dtype = _cell_dtype(release.depth)
    values = np.asarray(values, _COUNT_DTYPE)  # no copy: the occupied counts are int64 already
    cells = cells.astype(cell_dtype)
    ident = {"run_id": run_id, "partition": partition, "sequence": sequence}

    per_chunk = _chunk_capacity(ident, cells.size, cell_dtype.itemsize, max_chunk_bytes)
    n_chunks = math.ceil(cells.size / per_chunk) if cells.size else 0
    header = {
        "kind": "header",
        "format": FORMAT_VERSION,
        **ident,
        "t": int(release.t),
        "depth": int(release.depth),
        "d": d,
        "metadata": canonical(release.metadata, "release metadata"),
        "placement_seed": bytes(release.placement_seed),
        "n_chunks": n_chunks,
        "leaf_encoding": LEAF_ENCODING,
    }
    records = [pack(header)]
    digest = hashlib.sha256(records[0])  # incrementally: no joined copy of the release
    for index in range(n_chunks):
        part = slice(index * per_chunk, (index + 1) * per_chunk)
        records.append(pack_with_arrays({"kind": "chunk", **ident, "index": index},
                                        {"cells": cells[part], "counts": values[part]}))
        digest.update(records[-1])
    records.append(pack({"kind": "end", **ident, "n_chunks": n_chunks,
                         "sha256": digest.hexdigest()}))
    for position, record in enumerate(records):
        if len(record) > max_chunk_bytes:
            raise ConfigError(
                f"record {position} ({len(record)} bytes) must fit in max_chunk_bytes "
                f"({max_chunk_bytes}); raise max_chunk_bytes or shrink the release metadata"
            )
    return records


def _chunk_capacity(ident: dict[str, Any], n_cells: int, width: int, max_chunk_bytes: int) -> int:
    """Leaves per chunk so that every chunk record fits in ``max_chunk_bytes``."""
    # overhead with empty payloads and the widest index, plus room for two bin32 length headers
    empty = {"kind": "chunk", **ident, "index": max(n_cells, 1), "cells": b"", "counts": b""}
    per_chunk = (max_chunk_bytes - len(pack(empty)) - 6) // (width + 8)
    if n_cells and per_chunk < 1:
        raise ConfigError(
            f"max_chunk_bytes ({max_chunk_bytes}) must leave room for at least one leaf per chunk"
            "; raise it"
        )
    return max(per_chunk, 1)


# ---- reader ------------------------------------------------------------------------------


@dataclass
class _Header:
    key: ReleaseKey
    t: int
    depth: int
    d: int
    metadata: dict[str, Any]
    placement_seed: bytes
    n_chunks: int


def _parse_header(raw: bytes, *, max_depth: int) -> _Header:
    rec = unpack(raw, "record 0")
    if rec.get("kind") != "header":
        raise ReleaseIncompleteError(
            f"record 0 (kind {rec.get('kind')!r}) must be the header: a release starts with "
            "its header record (truncated at the front?)", "missing_header"
        )
    fmt = rec.get("format")
    if not is_int(fmt) or fmt != FORMAT_VERSION:
        raise ReleaseIncompleteError(
            f"header `format` ({fmt!r}) must be {FORMAT_VERSION}: this dpsynth reads "
            "release format 1 only; upgrade dpsynth to read newer releases",
            "unsupported_format",
        )
    if rec.get("leaf_encoding") != LEAF_ENCODING:
        raise ReleaseIncompleteError(
            f"header `leaf_encoding` ({rec.get('leaf_encoding')!r}) must be {LEAF_ENCODING!r}",
            "unsupported_format",
        )
    check_keys(rec, _HEADER_KEYS, "header")
    key = key_of(rec, "header")
    depth, t, d, n_chunks = rec["depth"], rec["t"], rec["d"], rec["n_chunks"]
    if not is_field_int(depth) or not 0 <= depth <= min(max_depth, _MAX_TREE_DEPTH):
        raise ReleaseIncompleteError(
            f"header `depth` ({depth!r}) must be an integer in [0, {max_depth}]; "
            "raise max_depth to decode deeper releases",
            "depth_limit" if is_int(depth) and max_depth < depth <= _MAX_TREE_DEPTH
            else "bad_header",
        )
    for name, value, low in (("t", t, 0), ("d", d, 1), ("n_chunks", n_chunks, 0)):
        if not is_field_int(value, low):
            raise ReleaseIncompleteError(
                f"header `{name}` must be an integer in [{low}, 2^63)", "bad_header")
    if n_chunks > 1 << depth:
        raise ReleaseIncompleteError(
            f"header `n_chunks` ({n_chunks}) must be at most 2^depth ({1 << depth})",
            "bad_header",
        )
    metadata, seed = rec["metadata"], rec["placement_seed"]
    if not isinstance(metadata, dict) or not is_int(metadata.get("d")) or metadata["d"] != d:
        raise ReleaseIncompleteError(
            f"header `metadata` must be a map whose 'd' equals the header's d ({d})",
            "bad_header",
        )
    if not isinstance(seed, bytes):
        raise ReleaseIncompleteError("header `placement_seed` must be bytes", "bad_header")
    return _Header(key, t, depth, d, metadata, seed, n_chunks)


def _parse_chunk(rec: dict[str, Any], header: _Header, after: int) -> tuple[np.ndarray, np.ndarray]:
    """Cells and counts of one chunk, checked; ``after`` is the last cell of earlier chunks."""
    index = rec["index"]
    cells_raw, counts_raw = rec["cells"], rec["counts"]
    if not isinstance(cells_raw, bytes) or not isinstance(counts_raw, bytes):
        raise ReleaseIncompleteError(f"chunk {index}: `cells` and `counts` must be bytes",
                                     "bad_chunk")
    width = _cell_dtype(header.depth).itemsize
    n = len(counts_raw) // 8
    if n == 0 or len(counts_raw) != 8 * n or len(cells_raw) != width * n:
        raise ReleaseIncompleteError(
            f"chunk {index}: `cells` ({len(cells_raw)} bytes) and `counts` ({len(counts_raw)} "
            f"bytes) must hold the same number (>= 1) of {width}-byte cells and 8-byte counts",
            "bad_chunk",
        )
    cells = np.frombuffer(cells_raw, dtype=_cell_dtype(header.depth)).astype(np.uint64)
    counts = np.frombuffer(counts_raw, dtype=_COUNT_DTYPE).astype(np.int64)
    if int(cells[-1]) >= 1 << header.depth:
        raise ReleaseIncompleteError(
            f"chunk {index}: cell {int(cells[-1])} must be below 2^depth ({1 << header.depth})",
            "bad_chunk",
        )
    if int(cells[0]) <= after or (n > 1 and np.any(cells[1:] <= cells[:-1])):
        raise ReleaseIncompleteError(
            f"chunk {index}: cells must increase strictly across the release (each leaf once)",
            "bad_chunk",
        )
    if counts.min() < 1 or counts.max() > header.t:
        # privacy: never name the offending count
        raise ReleaseIncompleteError(
            f"chunk {index}: counts must lie in [1, t] (non-zero leaves only, non-negative)",
            "bad_chunk",
        )
    return cells, counts


def decode_release(records: Iterable[bytes], *, max_depth: int = MAX_DECODE_DEPTH) -> Release:
    """Decode and check the records of exactly one release.

    Checks the order (header, chunks 0…n−1 each once, end, nothing after), that every record
    carries the header's (run_id, partition, sequence), the checksum, that cells are below
    2^depth and increasing, that counts are positive and sum to t.

    Raises
    ------
    ReleaseIncompleteError
        With the reason, on any missing, extra, mixed or corrupt record.
    """
    it = iter(records)
    raw_header = next(it, None)
    if raw_header is None:
        raise ReleaseIncompleteError("no records: a release starts with a header record",
                                     "truncated")
    reader = _Reader(_parse_header(raw_header, max_depth=max_depth), raw_header)
    for position, raw in enumerate(it, start=1):
        where = f"record {position}"
        rec = unpack(raw, where)
        kind = rec.get("kind")
        if kind == "header":
            raise ReleaseIncompleteError(
                f"{where} is a second header before the end record: the release is truncated "
                "or mixed with another", "unexpected_header"
            )
        if kind not in ("chunk", "end"):
            raise ReleaseIncompleteError(
                f"{where} `kind` ({kind!r}) must be 'header', 'chunk' or 'end'", "bad_kind"
            )
        if key_of(rec, where) != reader.header.key:
            raise ReleaseIncompleteError(
                f"{where} belongs to {key_of(rec, where)}, not to {reader.header.key} whose "
                "header came first: records of different releases are mixed (use ReleaseAssembler)",
                "mixed",
            )
        if kind == "chunk":
            reader.chunk(rec, raw, where)
            continue
        release = reader.end(rec, where)
        if next(it, None) is not None:
            raise ReleaseIncompleteError(
                f"no record may follow the end record ({where}); decode one release at a time",
                "trailing_record",
            )
        return release
    raise ReleaseIncompleteError(
        f"records ended before the end record, after {reader.expected} of "
        f"{reader.header.n_chunks} chunks: the release is truncated", "truncated"
    )


class _Reader:
    """Running state of one release being decoded: checked chunk by chunk, then at the end."""

    def __init__(self, header: _Header, raw_header: bytes) -> None:
        self.header = header
        self.digest = hashlib.sha256(bytes(raw_header))
        self.leaf_counts = np.zeros(1 << header.depth, dtype=np.int64)
        self.expected, self.last_cell, self.total = 0, -1, 0

    def chunk(self, rec: dict[str, Any], raw: bytes, where: str) -> None:
        """Check one chunk's place in the sequence and its contents, and add its leaves."""
        check_keys(rec, _CHUNK_KEYS, where)
        index, n_chunks = rec["index"], self.header.n_chunks
        if not is_field_int(index):
            raise ReleaseIncompleteError(
                f"{where}: chunk `index` must be an integer in [0, 2^63)", "bad_chunk")
        if index < self.expected:
            raise ReleaseIncompleteError(f"chunk {index} appears twice ({where})",
                                         "duplicate_chunk")
        if index >= n_chunks:
            raise ReleaseIncompleteError(
                f"chunk index ({index}) must be below n_chunks ({n_chunks})", "extra_chunk"
            )
        if index != self.expected:
            raise ReleaseIncompleteError(
                f"chunk index ({index}) must be {self.expected} at {where}: chunks come in order "
                f"0..n_chunks-1; chunk {self.expected} is missing or out of order", "reordered"
            )
        cells, counts = _parse_chunk(rec, self.header, self.last_cell)
        self.leaf_counts[cells] = counts
        self.total += sum(counts.tolist())  # exact: Python ints cannot overflow
        self.last_cell, self.expected = int(cells[-1]), self.expected + 1
        self.digest.update(raw)

    def end(self, rec: dict[str, Any], where: str) -> Release:
        """Check the end record, the checksum and the sum; return the release."""
        check_keys(rec, _END_KEYS, where)
        header = self.header
        if (self.expected != header.n_chunks or not is_int(rec["n_chunks"])
                or rec["n_chunks"] != header.n_chunks):
            raise ReleaseIncompleteError(
                f"end record after {self.expected} of {header.n_chunks} chunks: chunks are missing",
                "missing_chunks",
            )
        sha = rec["sha256"]
        if not isinstance(sha, str) or not hmac.compare_digest(sha, self.digest.hexdigest()):
            raise ReleaseIncompleteError(
                "sha256 of the header and chunks must match the end record's checksum: "
                "the release was corrupted or tampered with", "bad_checksum"
            )
        if self.total != header.t:
            raise ReleaseIncompleteError(f"leaf counts must sum to t ({header.t})", "bad_sum")
        return Release(
            t=header.t,
            depth=header.depth,
            leaf_counts=self.leaf_counts,
            metadata=header.metadata,
            placement_seed=header.placement_seed,
        )
