"""Deltas between two snapshots: what a state commit writes instead of the whole state.

Layer: core (msgpack, numpy). A snapshot (:mod:`dpsynth.state`) is a tree of dicts, lists,
scalars and numpy arrays. :func:`diff` compares two decoded snapshots structurally and returns
the operations that turn the first into the second:

- ``set`` a value (a scalar, or anything whose shape changed);
- ``patch`` an array of unchanged shape: the flat indices of the elements whose bytes changed,
  and their new values;
- ``grow`` an array whose first dimension grew with its old rows unchanged: the new rows;
- ``extend`` a list that grew with its old items unchanged (each diffed in place): the new items.

The counters of a step touch the cells its records fall in, and the open step's records are
appended: a delta is about the size of what the step changed, not of the state
(docs/benchmarks.md "State that travels"). :func:`apply` replays the operations on a decoded
snapshot; :func:`encode` / :func:`decode` put a delta on the wire with the SHA-256 digests of
the snapshot it starts from and of the one it makes, so that a restore re-packs the result and
refuses it unless it is, byte for byte, the snapshot that was committed
(:func:`snapshot_digest`). Deltas hold raw data, like snapshots (the open step's records at the
tree's resolution, exact counts): they need the protection of the raw-events topic.

>>> import numpy as np
>>> from dpsynth.state import pack_state, unpack_state
>>> old = {"t": 1, "counts": np.zeros(8, np.int64), "steps": [np.ones(2)]}
>>> new = {"t": 2, "counts": np.eye(1, 8, 3, np.int64)[0], "steps": [np.ones(2), np.zeros(3)]}
>>> blob = encode(diff(old, new), pack_state(old), pack_state(new))
>>> restored, digest = apply_delta(unpack_state(pack_state(old)), blob,
...                                snapshot_digest(pack_state(old)))
>>> check(restored, digest) == pack_state(new)
True
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

import msgpack
import numpy as np

from dpsynth.errors import StateCorruptError
from dpsynth.state import MAGIC, decode_value, encode_value, pack_state

DELTA_FORMAT = 1
_Path = list[str | int]


def snapshot_digest(blob: bytes) -> bytes:
    """The SHA-256 a snapshot carries of its body (checked by :func:`~dpsynth.state.
    unpack_state`)."""
    return bytes(blob[len(MAGIC):len(MAGIC) + 32])


def _as_words(a: np.ndarray) -> np.ndarray:
    """The array's elements as unsigned integers of their width (byte equality: -0.0 and NaN
    payloads count), or as rows of bytes for other widths."""
    flat = np.ascontiguousarray(a).reshape(-1)
    size = a.dtype.itemsize
    if size in (1, 2, 4, 8):
        return flat.view(f"u{size}")
    return flat.view(np.uint8).reshape(flat.size, size)


def _raw(a: np.ndarray) -> memoryview:
    """The array's bytes (compared as bytes: a float view would call -0.0 and 0.0 equal)."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8).data


def _changed(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Flat indices of the elements whose bytes differ (same dtype and shape)."""
    differ = _as_words(old) != _as_words(new)
    return np.flatnonzero(differ if differ.ndim == 1 else differ.any(axis=1))


def _same(a: Any, b: Any) -> bool:
    """Equal as packed: same type and value (1 and 1.0 pack differently), arrays byte-equal."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and a.tobytes() == b.tobytes())
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return np.float64(a).tobytes() == np.float64(b).tobytes()
    return bool(a == b)


def _diff_array(old: np.ndarray, new: np.ndarray, path: _Path, ops: list[Any]) -> None:
    if old.shape == new.shape:
        if not new.size or _raw(old) == _raw(new):  # most arrays are unchanged: one memcmp
            return
        changed = _changed(old, new)
        if not changed.size:
            return
        index = changed.astype("<u4" if new.size < 2**32 else "<u8")
        if changed.size * (index.itemsize + new.itemsize) < new.nbytes:
            ops.append(["patch", path, index.tobytes(), np.ascontiguousarray(
                new.reshape(-1)[changed])])
            return
    elif (new.ndim >= 1 and old.ndim == new.ndim and old.shape[1:] == new.shape[1:]
          and new.shape[0] > old.shape[0]
          and new[:old.shape[0]].tobytes() == np.ascontiguousarray(old).tobytes()):
        ops.append(["grow", path, np.ascontiguousarray(new[old.shape[0]:])])
        return
    ops.append(["set", path, new])


def _diff(old: Any, new: Any, path: _Path, ops: list[Any]) -> None:
    if type(old) is dict and type(new) is dict and list(old) == list(new):
        for key in new:
            _diff(old[key], new[key], [*path, key], ops)
    elif type(old) is list and type(new) is list and len(old) <= len(new):
        for i, item in enumerate(old):
            _diff(item, new[i], [*path, i], ops)
        if len(new) > len(old):
            ops.append(["extend", path, new[len(old):]])
    elif (isinstance(old, np.ndarray) and isinstance(new, np.ndarray)
          and old.dtype == new.dtype):
        _diff_array(old, new, path, ops)
    elif not _same(old, new):
        ops.append(["set", path, new])


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[Any]:
    """The operations that turn the decoded snapshot ``old`` into ``new`` (module docstring)."""
    ops: list[Any] = []
    _diff(old, new, [], ops)
    return ops


def encode(ops: list[Any], old_blob: bytes, new_blob: bytes) -> bytes:
    """A delta on the wire: the operations and the digests of both snapshots (msgpack)."""
    return msgpack.packb({"format": DELTA_FORMAT, "from": snapshot_digest(old_blob),
                          "to": snapshot_digest(new_blob), "ops": ops},
                         default=encode_value, use_bin_type=True)


def decode(blob: bytes) -> dict[str, Any]:
    """The delta in ``blob`` (``format``, ``from``, ``to``, ``ops``), or StateCorruptError."""
    try:
        delta = msgpack.unpackb(blob, object_hook=decode_value, raw=False,
                                strict_map_key=False)
    except Exception as e:  # noqa: BLE001 - any decoding failure is corruption
        raise StateCorruptError("a state delta cannot be decoded") from e
    if not isinstance(delta, dict) or delta.get("format") != DELTA_FORMAT:
        raise StateCorruptError(f"a state delta is not of format {DELTA_FORMAT}")
    return delta


def _parent(state: Any, path: _Path) -> tuple[Any, str | int]:
    node = state
    for key in path[:-1]:
        node = node[key]
    return node, path[-1]


def _apply_op(state: Any, op: list[Any]) -> Any:
    kind, path, *args = op
    if not path:
        if kind != "set":
            raise StateCorruptError(f"a state delta's {kind!r} has no path")
        return args[0]
    parent, key = _parent(state, path)
    if kind == "set":
        parent[key] = args[0]
    elif kind == "patch":
        target = parent[key]
        index = np.frombuffer(args[0], "<u4" if target.size < 2**32 else "<u8")
        target.reshape(-1)[index] = args[1]
    elif kind == "grow":
        parent[key] = np.concatenate([parent[key], args[0]])
    elif kind == "extend":
        parent[key].extend(args[0])
    else:
        raise StateCorruptError(f"a state delta holds an unknown operation {kind!r}")
    return state


def apply_ops(state: dict[str, Any], ops: list[Any]) -> dict[str, Any]:
    """Apply operations to a decoded snapshot (in place when the root is kept)."""
    for op in ops:
        state = _apply_op(state, op)
    return state


def apply_delta(state: dict[str, Any], blob: bytes, expect_from: bytes
                ) -> tuple[dict[str, Any], bytes]:
    """Apply the encoded delta ``blob`` to the decoded snapshot ``state`` whose digest is
    ``expect_from``; returns the new state and the digest it must have (the caller re-packs
    and checks it once, :func:`check`, after a chain of deltas)."""
    delta = decode(blob)
    if not hmac.compare_digest(bytes(delta["from"]), expect_from):
        raise StateCorruptError("a state delta does not start from the snapshot it is applied to")
    try:
        return apply_ops(state, delta["ops"]), bytes(delta["to"])
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise StateCorruptError(f"a state delta does not fit its snapshot ({type(e).__name__})"
                                ) from None


def target_digest(blob: bytes) -> bytes:
    """The digest of the snapshot a delta makes."""
    return bytes(decode(blob)["to"])


def check(state: dict[str, Any], digest: bytes) -> bytes:
    """``pack_state(state)`` if its digest is ``digest``, else StateCorruptError."""
    blob = pack_state(state)
    if not hmac.compare_digest(snapshot_digest(blob), digest):
        raise StateCorruptError("a snapshot rebuilt from its deltas differs from the one "
                                "committed")
    return blob


def digest_of(blob: bytes) -> str:
    """Hex SHA-256 of a record (manifests list their records by it)."""
    return hashlib.sha256(blob).hexdigest()
