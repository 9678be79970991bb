"""Tabular releases: one synthetic table per step, and its wire format ``tabular.v1``.

Layer: core. The envelope follows :mod:`~dpsynth.release.points_v1` (docs/design.md D17): a
**header**, bounded **chunks** of rows and an **end** record carrying the SHA-256 of the header and
chunk bytes, all msgpack maps identified by ``(run_id, partition, sequence)``. Encoding is
deterministic (sorted metadata keys), so a retried release is a byte-identical duplicate.

- header ``{"kind": "header", "format": "tabular.v1", "run_id", "partition", "sequence",
  "step", "p", "n_rows", "width", "metadata", "n_chunks"}``;
- chunk ``{"kind": "chunk", "run_id", "partition", "sequence", "index", "rows"}``: ``rows`` is
  the row-major little-endian unsigned ``width``-byte codes of consecutive rows;
- end ``{"kind": "end", "run_id", "partition", "sequence", "n_chunks", "sha256"}``.

A point-release reader refuses the header (its format is not 1), and vice versa.

>>> rel = TabularRelease(0, 1, np.array([[0, 1], [1, 0]]), {"algorithm": "demo"})
>>> recs = encode_tabular_release(rel, run_id="r", partition=0)
>>> decode_tabular_release(recs) == rel
True
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpsynth.errors import ConfigError
from dpsynth.release.framing import (
    DEFAULT_MAX_CHUNK_BYTES,
    ReleaseIncompleteError,
    ReleaseKey,
    canonical,
    check_keys,
    is_field_int,
    is_int,
    key_of,
    pack,
    unpack,
)

TABULAR_FORMAT = "tabular.v1"
_HEADER_KEYS = frozenset(("kind", "format", "run_id", "partition", "sequence", "step", "p",
                          "n_rows", "width", "metadata", "n_chunks"))
_CHUNK_KEYS = frozenset(("kind", "run_id", "partition", "sequence", "index", "rows"))
_END_KEYS = frozenset(("kind", "run_id", "partition", "sequence", "n_chunks", "sha256"))


@dataclass
class TabularRelease:
    """The synthetic table released at one step.

    ``records`` are int codes of shape (m, p) (decode with :meth:`Domain.decode`); ``metadata``
    names the algorithm, counter, ε, neighbour notion, key fingerprint and domain digest.
    """

    sequence: int
    step: int
    records: np.ndarray
    metadata: dict[str, Any] = field(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TabularRelease)
            and (self.sequence, self.step) == (other.sequence, other.step)
            and np.array_equal(np.asarray(self.records), np.asarray(other.records))
            and np.asarray(self.records).shape == np.asarray(other.records).shape
            and canonical(self.metadata, "m") == canonical(other.metadata, "m")
        )


def _width(records: np.ndarray) -> int:
    top = int(records.max()) if records.size else 0
    return 1 if top < 1 << 8 else 2 if top < 1 << 16 else 4


def _check(release: TabularRelease) -> np.ndarray:
    if not isinstance(release, TabularRelease):
        raise ConfigError(f"release ({type(release).__name__}) must be a TabularRelease")
    for name in ("sequence", "step"):
        value = getattr(release, name)
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise ConfigError(f"release {name} ({value!r}) must be an integer >= 0")
    rows = np.asarray(release.records)
    if rows.ndim != 2 or rows.shape[1] < 1 or rows.dtype.kind not in "iu":
        raise ConfigError(f"release records (shape {rows.shape}) must be an (m, p) int array")
    if rows.size and (rows.min() < 0 or rows.max() >= 1 << 32):
        raise ConfigError("release records must be codes in [0, 2^32)")
    return rows


def encode_tabular_release(
    release: TabularRelease,
    *,
    run_id: str,
    partition: int,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
) -> list[bytes]:
    """[header, chunk 0, …, end] msgpack records, byte-identical for equal releases."""
    rows = _check(release)
    if not isinstance(run_id, str) or not run_id:
        raise ConfigError(f"run_id ({run_id!r}) must be a non-empty string")
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ConfigError(f"partition ({partition!r}) must be an integer >= 0")
    ident = {"run_id": run_id, "partition": partition, "sequence": int(release.sequence)}
    width = _width(rows)
    raw = rows.astype(np.dtype(f"<u{width}")).tobytes()
    row_bytes = width * rows.shape[1]
    empty = pack({"kind": "chunk", **ident, "index": max(rows.shape[0], 1), "rows": b""})
    per_chunk = (max_chunk_bytes - len(empty) - 6) // row_bytes
    if per_chunk < 1:
        raise ConfigError(f"max_chunk_bytes ({max_chunk_bytes}) must fit one row; raise it")
    n_chunks = math.ceil(rows.shape[0] / per_chunk) if rows.shape[0] else 0
    header = {"kind": "header", "format": TABULAR_FORMAT, **ident, "step": int(release.step),
              "p": int(rows.shape[1]), "n_rows": int(rows.shape[0]), "width": width,
              "metadata": canonical(release.metadata, "release metadata"),
              "n_chunks": n_chunks}
    records = [pack(header)]
    step = per_chunk * row_bytes
    for index in range(n_chunks):
        records.append(pack({"kind": "chunk", **ident, "index": index,
                              "rows": raw[index * step:(index + 1) * step]}))
    digest = hashlib.sha256(b"".join(records)).hexdigest()
    records.append(pack({"kind": "end", **ident, "n_chunks": n_chunks, "sha256": digest}))
    if len(records[0]) > max_chunk_bytes:
        raise ConfigError("the header must fit in max_chunk_bytes; shrink the metadata")
    return records


def _header(raw: bytes) -> dict[str, Any]:
    """The checked header (same order of checks as format 1: kind, format, keys, identity)."""
    rec = unpack(raw, "record 0")
    if rec.get("kind") != "header":
        raise ReleaseIncompleteError("record 0 must be the header (truncated at the front?)",
                                     "missing_header")
    if rec.get("format") != TABULAR_FORMAT:
        raise ReleaseIncompleteError(
            f"header `format` ({rec.get('format')!r}) must be {TABULAR_FORMAT!r}; point releases "
            "are read with dpsynth.release.points_v1.decode_release", "unsupported_format"
        )
    check_keys(rec, _HEADER_KEYS, "header", TABULAR_FORMAT)
    key_of(rec, "header")
    for name in ("step", "p", "n_rows", "n_chunks"):
        if not is_field_int(rec[name], int(name == "p")):
            raise ReleaseIncompleteError(
                f"header `{name}` must be an integer in [{int(name == 'p')}, 2^63)", "bad_header")
    width = rec["width"]
    if not is_int(width) or width not in (1, 2, 4) or not isinstance(rec["metadata"], dict):
        raise ReleaseIncompleteError("header `width` must be 1, 2 or 4 and `metadata` a map",
                                     "bad_header")
    return rec


def decode_tabular_release(records: Iterable[bytes]) -> TabularRelease:
    """Decode and check the records of exactly one tabular release.

    Raises ReleaseIncompleteError on a missing, extra, reordered, mixed or corrupt record.
    """
    it = iter(records)
    raw_header = next(it, None)
    if raw_header is None:
        raise ReleaseIncompleteError("no records: a release starts with a header record",
                                     "truncated")
    head = _header(raw_header)
    key: ReleaseKey = key_of(head, "header")
    digest = hashlib.sha256(bytes(raw_header))
    parts: list[bytes] = []
    for position, raw in enumerate(it, start=1):
        where = f"record {position}"
        rec = unpack(raw, where)
        kind = rec.get("kind")
        if kind == "header":
            raise ReleaseIncompleteError(f"{where} is a second header before the end record",
                                         "unexpected_header")
        if kind not in ("chunk", "end"):
            raise ReleaseIncompleteError(f"{where}: kind must be 'chunk' or 'end'", "bad_kind")
        if key_of(rec, where) != key:
            raise ReleaseIncompleteError(f"{where} belongs to another release", "mixed")
        if kind == "chunk":
            _check_chunk(rec, where, len(parts), head["n_chunks"])
            parts.append(rec["rows"])
            digest.update(raw)
            continue
        check_keys(rec, _END_KEYS, where, TABULAR_FORMAT)
        if (len(parts) != head["n_chunks"] or not is_int(rec["n_chunks"])
                or rec["n_chunks"] != head["n_chunks"]):
            raise ReleaseIncompleteError(
                f"end record after {len(parts)} of {head['n_chunks']} chunks: chunks are missing",
                "missing_chunks",
            )
        sha = rec["sha256"]
        if not isinstance(sha, str) or not hmac.compare_digest(sha, digest.hexdigest()):
            raise ReleaseIncompleteError(
                "sha256 of the header and chunks must match the end record: corrupted or altered",
                "bad_checksum",
            )
        body = b"".join(parts)
        expected = head["n_rows"] * head["p"] * head["width"]
        if len(body) != expected:
            raise ReleaseIncompleteError("chunks must hold exactly n_rows × p codes", "bad_sum")
        if next(it, None) is not None:
            raise ReleaseIncompleteError("no record may follow the end record", "trailing_record")
        rows = np.frombuffer(body, dtype=np.dtype(f"<u{head['width']}")).astype(np.int64)
        return TabularRelease(key.sequence, head["step"], rows.reshape(head["n_rows"], head["p"]),
                              head["metadata"])
    raise ReleaseIncompleteError("records ended before the end record: the release is truncated",
                                 "truncated")


def _check_chunk(rec: dict[str, Any], where: str, expected: int, n_chunks: int) -> None:
    """A chunk's keys, its index (the next one, below n_chunks) and its ``rows`` bytes."""
    check_keys(rec, _CHUNK_KEYS, where, TABULAR_FORMAT)
    index = rec["index"]
    if not is_field_int(index):
        raise ReleaseIncompleteError(f"{where}: chunk `index` must be an integer in [0, 2^63)",
                                     "bad_chunk")
    if index < expected:
        raise ReleaseIncompleteError(f"chunk {index} appears twice ({where})", "duplicate_chunk")
    if index >= n_chunks:
        raise ReleaseIncompleteError(
            f"chunk index ({index}) must be below n_chunks ({n_chunks})", "extra_chunk")
    if index != expected:
        raise ReleaseIncompleteError(
            f"chunk index ({index}) must be {expected}: chunk {expected} is missing or out of "
            "order", "reordered")
    if not isinstance(rec["rows"], bytes):
        raise ReleaseIncompleteError(f"chunk {index}: `rows` must be bytes", "bad_chunk")
