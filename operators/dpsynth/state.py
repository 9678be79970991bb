"""Snapshots: the whole synthesizer state as checked bytes (msgpack + SHA-256).

Layer: core. A snapshot holds counts and stored firing times but never key material; it is
bound to its key by the key's public fingerprint, so restoring under another key fails loudly
instead of mixing two noise streams. It is raw data — the open step's records at the tree's
resolution, exact counts: a snapshot needs the same protection as the raw-events topic
(docs/design.md D11).
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgpack
import numpy as np

from dpsynth.errors import StateCorruptError

MAGIC = b"DPSYNTH-STATE"
STATE_VERSION = 1


def encode_value(obj: Any) -> Any:
    """msgpack's ``default`` for states and their deltas: numpy arrays (dtype, shape, bytes)
    and scalars, tuples as lists."""
    if isinstance(obj, np.ndarray):
        return {"__nd__": True, "dtype": obj.dtype.str, "shape": list(obj.shape),
                "data": np.ascontiguousarray(obj).tobytes()}
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"cannot snapshot a {type(obj).__name__}")


def decode_value(obj: dict[str, Any]) -> Any:
    """msgpack's ``object_hook`` inverse of :func:`encode_value` (arrays copied: writable)."""
    if obj.get("__nd__"):
        array = np.frombuffer(obj["data"], dtype=np.dtype(obj["dtype"]))
        return array.reshape(obj["shape"]).copy()
    return obj


def pack_state(state: dict[str, Any]) -> bytes:
    """Serialise a state dict (numbers, strings, bytes, lists, dicts, numpy arrays)."""
    body: bytes = msgpack.packb({"version": STATE_VERSION, "state": state}, default=encode_value,
                                use_bin_type=True)
    return MAGIC + hashlib.sha256(body).digest() + body


def unpack_state(blob: bytes, *, verify: bool = True) -> dict[str, Any]:
    """Inverse of :func:`pack_state`; raises StateCorruptError on any damage (``verify``
    False skips the checksum: for a snapshot this process just made)."""
    if not isinstance(blob, bytes | bytearray) or not blob.startswith(MAGIC):
        raise StateCorruptError("not a dpsynth snapshot (bad magic); pass bytes from snapshot()")
    digest, body = blob[len(MAGIC):len(MAGIC) + 32], blob[len(MAGIC) + 32:]
    if verify and hashlib.sha256(body).digest() != digest:
        raise StateCorruptError("snapshot checksum mismatch: the bytes are truncated or altered")
    try:
        payload = msgpack.unpackb(body, object_hook=decode_value, raw=False, strict_map_key=False)
    except Exception as exc:  # noqa: BLE001 - any decoding failure is corruption
        raise StateCorruptError("snapshot body cannot be decoded") from exc
    if payload.get("version") != STATE_VERSION:
        raise StateCorruptError(
            f"snapshot version ({payload.get('version')}) must be {STATE_VERSION}; "
            "restore it with the dpsynth release that wrote it"
        )
    return dict(payload["state"])
