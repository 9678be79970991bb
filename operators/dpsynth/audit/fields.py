"""Published outputs as flat fields, and the deterministic differences between neighbours.

Layer: audit. Everything an entry point publishes — release records (header, chunks, end),
metadata, file names, row counts, shapes, exit codes — is flattened to ``name → value`` with
hashable values (bytes and arrays as their length or shape and a digest). A field is a
**deterministic difference** when it takes one value under every key on D, one value under every
key on D′, and the two differ: a function of the data, not of the noise, that tells the
neighbours apart (issue 13 (a); e.g. the number of releases, a step index, an exact count).

False alarm: if the entry point is ε-DP, a field takes value a on D with probability p and b ≠ a
on D′ with probability q, where q ≤ 1 − e^−ε·p and p ≤ 1 − e^−ε·q; so p·q ≤ (e^ε/(1 + e^ε))²
and n keys on each side flag it with probability at most (e^ε/(1 + e^ε))^(2n)
(:func:`false_alarm_bound`).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

#: The value of a field an output does not have (e.g. a release that only D′ makes).
ABSENT = "<absent>"
#: Sequences of scalars up to this length are one field; longer ones are digested.
_SHORT = 32

Fields = dict[str, Hashable]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _scalar(value: Any) -> Hashable:
    if isinstance(value, float | np.floating):
        value = float(value)
        return "nan" if math.isnan(value) else value
    if isinstance(value, np.integer | np.bool_):
        return value.item()
    return value


def flatten(value: Any, name: str, out: Fields) -> Fields:
    """Add ``value`` to ``out`` as flat fields under ``name`` (dicts by key, sequences by index)."""
    if isinstance(value, Mapping):
        for key in sorted(value, key=str):
            flatten(value[key], f"{name}.{key}", out)
    elif isinstance(value, bytes | bytearray):
        out[name] = ("bytes", len(value), _digest(bytes(value)))
    elif isinstance(value, np.ndarray):
        out[f"{name}.shape"] = tuple(int(s) for s in value.shape)
        out[name] = ("array", str(value.dtype), _digest(np.ascontiguousarray(value).tobytes()))
    elif isinstance(value, list | tuple):
        out[f"{name}.len"] = len(value)
        if all(not isinstance(v, Mapping | list | tuple | bytes | np.ndarray) for v in value):
            scalars = tuple(_scalar(v) for v in value)
            out[name] = scalars if len(scalars) <= _SHORT else ("seq", _digest(repr(scalars)
                                                                                 .encode()))
        else:
            for i, item in enumerate(value):
                flatten(item, f"{name}[{i}]", out)
    else:
        out[name] = _scalar(value)
    return out


def flatten_records(records: Sequence[bytes], name: str, out: Fields) -> Fields:
    """Add one encoded release (msgpack records: header, chunks, end) to ``out``."""
    out[f"{name}.records"] = len(records)
    for i, raw in enumerate(records):
        out[f"{name}.record[{i}].bytes"] = len(raw)
        flatten(msgpack.unpackb(raw, raw=False), f"{name}.record[{i}]", out)
    return out


@dataclass(frozen=True)
class Difference:
    """A field constant under every key on each input, with different values."""

    field: str
    on_d: Hashable
    on_neighbour: Hashable
    pair: str

    def describe(self) -> str:
        """One line for reports."""
        return f"{self.pair}: {self.field} = {self.on_d!r} on D, {self.on_neighbour!r} on D′"


def _constant(outputs: Iterable[Fields], name: str) -> tuple[bool, Hashable]:
    values = {out.get(name, ABSENT) for out in outputs}
    return len(values) == 1, next(iter(values))


def deterministic_differences(on_d: Sequence[Fields], on_neighbour: Sequence[Fields],
                              pair: str) -> list[Difference]:
    """Every field constant across the keys on D and on D′ whose two values differ."""
    names = sorted({name for out in (*on_d, *on_neighbour) for name in out})
    found = []
    for name in names:
        constant_d, value_d = _constant(on_d, name)
        if not constant_d:
            continue
        constant_n, value_n = _constant(on_neighbour, name)
        if constant_n and value_n != value_d:
            found.append(Difference(name, value_d, value_n, pair))
    return found


def field_kind(name: str) -> str:
    """A field's name without its indices: the kind of published value it is.

    >>> field_kind("release[3].record[0].metadata.t")
    'release.record.metadata.t'
    """
    return re.sub(r"\[\d+\]", "", name)


def false_alarm_bound(epsilon: float, keys: int) -> float:
    """Largest probability that one field of an ε-DP output is flagged with ``keys`` keys.

    >>> f"{false_alarm_bound(1.0, 100):.1e}"
    '6.1e-28'
    """
    p = 1.0 / (1.0 + math.exp(-epsilon))
    return p ** (2 * keys)
