"""The envelope every release format shares: record identity, canonical msgpack, errors.

Layer: core. A release travels as msgpack maps (a header, bounded chunks, a checksummed end)
identified by :class:`ReleaseKey` ``(run_id, partition, sequence)``; encoding is canonical
(sorted keys, tuples as lists), so equal releases give byte-identical records and consumers drop
retried ones as duplicates (docs/design.md D12, D17). Formats: :mod:`~dpsynth.release.points_v1`,
:mod:`~dpsynth.release.tabular_v1`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, TypeGuard

import msgpack
import numpy as np

from dpsynth.errors import ConfigError, DpsynthError

#: Default bound on every record: a quarter of Kafka's default 1 MB message limit.
DEFAULT_MAX_CHUNK_BYTES = 256_000


#: The stable reason codes of :class:`ReleaseIncompleteError` (schemas/README.md "Reason
#: codes"; the conformance vectors and every other reader use the same codes).
REASONS: dict[str, str] = {
    "undecodable": "a record is not bytes holding exactly one msgpack map",
    "bad_identity": "a record's run_id, partition or sequence is missing or invalid",
    "missing_header": "the first record is not a header (the release is cut at the front)",
    "unsupported_format": "the header's format (or leaf encoding) is not one this reader reads",
    "bad_keys": "a record's keys are not exactly those of its kind in its format",
    "bad_header": "a header field is missing its type or range (t, depth, d, n_chunks, ...)",
    "depth_limit": "the header's depth exceeds the reader's max_depth",
    "unexpected_header": "a second header before the end record",
    "bad_kind": "a record's kind is not header, chunk or end",
    "mixed": "a record of another release among this release's records",
    "duplicate_chunk": "a chunk index that was already read",
    "extra_chunk": "a chunk index at or beyond the header's n_chunks",
    "reordered": "a chunk index beyond the next expected one (a chunk missing or out of order)",
    "bad_chunk": "a chunk's index or payload is malformed (sizes, cells, counts, rows)",
    "missing_chunks": "the end record came before all n_chunks chunks, or disagrees on n_chunks",
    "bad_checksum": "the end record's sha256 is not that of the header and chunk bytes",
    "bad_sum": "the chunks do not add up to the header (counts sum to t, rows fill n_rows)",
    "trailing_record": "a record after the end record",
    "truncated": "the records end before the end record",
    "no_header": "assembler: a chunk or end record of a release whose header is not held",
    "conflicting_header": "assembler: a header differing from the one held for its release",
    "conflicting_chunk": "assembler: a chunk differing from the one held at its index",
    "evicted": "assembler: more than max_pending releases open at once; the oldest is dropped",
}


class ReleaseIncompleteError(DpsynthError, ValueError):
    """A release's records are missing, duplicated, out of order, mixed or corrupt.

    ``reason`` is one of the stable codes of :data:`REASONS` (for programs; the message is for
    people and may change).
    """

    def __init__(self, message: str, reason: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown release reason code {reason!r}")
        super().__init__(message)
        self.reason = reason


class ReleaseKey(NamedTuple):
    """Identity of one release on the wire: the run, the input partition and the sequence."""

    run_id: str
    partition: int
    sequence: int


# ---- records -----------------------------------------------------------------------------


def is_int(value: object) -> TypeGuard[int | np.integer[Any]]:
    """An integer, Python's or numpy's, and not a bool."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def is_field_int(value: object, low: int = 0) -> TypeGuard[int]:
    """An integer of a record field: in [low, 2^63) (int64, as every reader holds them).

    Records decoded from msgpack hold Python ints; a numpy integer passes too.
    """
    return is_int(value) and bool(low <= value < 1 << 63)


def canonical(value: Any, where: str) -> Any:
    """Metadata in canonical msgpack form: str keys sorted, tuples as lists, numpy as Python."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return value
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str):
                raise ConfigError(f"{where} key ({key!r}) must be a str")
        return {k: canonical(value[k], f"{where}[{k!r}]") for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [canonical(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise ConfigError(
        f"{where} ({type(value).__name__}) must be None, bool, int, float, str, bytes, "
        "a list or a str-keyed dict"
    )


def pack(obj: object) -> bytes:
    packed: bytes = msgpack.packb(obj, use_bin_type=True)
    return packed


def _bin_header(size: int) -> bytes:
    """msgpack's header of a ``size``-byte bin (bin 8, 16 or 32: the smallest that fits)."""
    if size < 1 << 8:
        return bytes((0xC4, size))
    if size < 1 << 16:
        return b"\xc5" + size.to_bytes(2, "big")
    return b"\xc6" + size.to_bytes(4, "big")


def pack_with_arrays(head: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    """``pack({**head, **{name: array.tobytes()}})``, byte for byte, with one copy of the
    arrays' buffers instead of four (``tobytes``, msgpack's buffer and result, a join): a
    release chunk is up to a quarter megabyte, and a release at t = 10⁶ about a megabyte.

    ``arrays`` must be contiguous and in the dtype (byte order included) the record stores.
    """
    fields = len(head) + len(arrays)
    if fields > 15 or not head:  # not a fixmap after a non-empty head: the general path
        return pack({**head, **{k: a.tobytes() for k, a in arrays.items()}})
    parts: list[Any] = [bytes((0x80 | fields,)), pack(head)[1:]]  # the head's fixmap, re-sized
    for name, array in arrays.items():
        if not array.flags.c_contiguous:
            raise ValueError(f"array {name!r} must be contiguous")
        parts += [pack(name), _bin_header(array.nbytes), array]
    return b"".join(parts)


def unpack(raw: object, where: str) -> dict[str, Any]:
    """Decode one record into a dict, or raise ReleaseIncompleteError."""
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise ReleaseIncompleteError(f"{where} ({type(raw).__name__}) must be bytes",
                                     "undecodable")
    try:
        obj = msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.UnpackException):
        raise ReleaseIncompleteError(f"{where} cannot be decoded as one msgpack map",
                                     "undecodable") from None
    if not isinstance(obj, dict):
        raise ReleaseIncompleteError(f"{where} must be a msgpack map", "undecodable")
    return obj


def key_of(rec: dict[str, Any], where: str) -> ReleaseKey:
    run_id = rec.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise ReleaseIncompleteError(f"{where}: `run_id` must be a non-empty string",
                                     "bad_identity")
    return ReleaseKey(run_id, _identity_int(rec, "partition", where),
                      _identity_int(rec, "sequence", where))


def _identity_int(rec: dict[str, Any], name: str, where: str) -> int:
    value = rec.get(name)
    if not is_field_int(value):
        raise ReleaseIncompleteError(f"{where}: `{name}` must be an integer in [0, 2^63)",
                                     "bad_identity")
    return value


def check_keys(rec: dict[str, Any], expected: frozenset[str], where: str,
               fmt: object = 1) -> None:
    """The record's keys are exactly ``expected`` (those of format ``fmt``), or raise."""
    if set(rec) != expected:
        missing, extra = sorted(expected - set(rec)), sorted(set(rec) - expected)
        raise ReleaseIncompleteError(
            f"{where}: keys must be exactly those of format {fmt} "
            f"(missing {missing}, unknown {extra})", "bad_keys"
        )


def release_key(record: bytes) -> ReleaseKey:
    """The (run_id, partition, sequence) of any record of a release (header, chunk or end)."""
    return key_of(unpack(record, "record"), "record")


def check_identity(key: ReleaseKey) -> None:
    if not isinstance(key.run_id, str) or not key.run_id:
        raise ConfigError(f"run_id ({key.run_id!r}) must be a non-empty string")
    for name in ("partition", "sequence"):
        value = getattr(key, name)
        if not is_int(value) or value < 0:
            raise ConfigError(f"{name} ({value!r}) must be an integer >= 0")


