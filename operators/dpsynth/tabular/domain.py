"""A declared finite tabular domain X = X_1 × … × X_p and the record codec (paper 003 §3.1).

Layer: core. Each attribute is a finite set, given either by its category labels or by its size
(integer codes 0..size−1). Records are encoded to int64 codes; a record that does not fit is
rejected with a reason naming the attribute and the problem, never the value (docs/design.md D18).
Format: ``schemas/domain.v1.json`` (see ``schemas/README.md``). The Liu et al. (2021) domain
files (``{"age": 91, ...}``) are read too.

>>> dom = Domain.from_dict({"version": 1, "attributes": [
...     {"name": "sex", "categories": ["F", "M"]}, {"name": "age10", "size": 10}]})
>>> codes, reasons = dom.encode([{"sex": "M", "age10": 3}, {"sex": "X", "age10": 1}])
>>> codes.tolist(), reasons
([[1, 3]], [None, "attribute 'sex': unknown category"])
>>> dom.decode(codes)
[{'sex': 'M', 'age10': 3}]
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpsynth.errors import ConfigError, SchemaError

DOMAIN_VERSION = 1
#: Largest attribute size accepted (codes are stored as int64, cells of a pair as int64).
MAX_ATTRIBUTE_SIZE = 1 << 20
_TOP_KEYS = frozenset(("version", "name", "attributes", "$schema"))


@dataclass(frozen=True)
class Attribute:
    """One attribute: its name, its size and, optionally, its category labels (index = code)."""

    name: str
    size: int
    categories: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.categories is not None:
            return {"name": self.name, "categories": list(self.categories)}
        return {"name": self.name, "size": self.size}


def _attribute(spec: object, position: int) -> Attribute:
    where = f"domain attribute {position}"
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where} must be an object with `name` and `categories` or `size`")
    extra = set(spec) - {"name", "categories", "size"}
    if extra:
        raise ConfigError(f"{where}: unknown keys {sorted(extra)}; allowed: name, categories, size")
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: `name` must be a non-empty string")
    cats, size = spec.get("categories"), spec.get("size")
    if (cats is None) == (size is None):
        raise ConfigError(f"attribute '{name}': give exactly one of `categories` or `size`")
    if cats is not None:
        if not isinstance(cats, list | tuple) or not all(isinstance(c, str) for c in cats):
            raise ConfigError(f"attribute '{name}': `categories` must be a list of strings")
        if len(set(cats)) != len(cats):
            raise ConfigError(f"attribute '{name}': `categories` must be unique")
        size = len(cats)
        cats = tuple(cats)
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_ATTRIBUTE_SIZE:
        raise ConfigError(
            f"attribute '{name}': size must be an integer in [1, {MAX_ATTRIBUTE_SIZE}]"
        )
    return Attribute(name, int(size), cats)


class Domain:
    """A finite product domain; the order of the attributes is the column order of the codes.

    Parameters
    ----------
    attributes
        The attributes, in column order; names must be unique.
    name
        Optional label of the domain.
    """

    def __init__(self, attributes: Sequence[Attribute], name: str | None = None) -> None:
        if not attributes:
            raise ConfigError("a domain needs at least one attribute; list them in `attributes`")
        names = [a.name for a in attributes]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise ConfigError(f"attribute names must be unique; repeated: {dup}")
        self._attrs = tuple(attributes)
        self.name = name
        self._index = {a.name: i for i, a in enumerate(self._attrs)}
        self._labels = [
            None if a.categories is None else {c: k for k, c in enumerate(a.categories)}
            for a in self._attrs
        ]

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Domain:
        """From the v1 format, or from a Liu et al. style ``{name: size}`` map (order kept)."""
        if not isinstance(d, Mapping):
            raise ConfigError("a domain must be a JSON object; see schemas/domain.v1.json")
        if "attributes" not in d:
            if d and all(isinstance(v, int) and not isinstance(v, bool) for v in d.values()):
                return cls([_attribute({"name": k, "size": v}, i) for i, (k, v) in
                            enumerate(d.items())])
            raise ConfigError(
                "domain must have `attributes` (format v1, schemas/domain.v1.json) or map every "
                "attribute name to its size"
            )
        extra = set(d) - _TOP_KEYS
        if extra:
            raise ConfigError(f"domain: unknown keys {sorted(extra)}; see schemas/domain.v1.json")
        if d.get("version", DOMAIN_VERSION) != DOMAIN_VERSION:
            raise ConfigError(f"domain `version` must be {DOMAIN_VERSION}")
        attrs = d["attributes"]
        if not isinstance(attrs, list):
            raise ConfigError("domain `attributes` must be a list")
        name = d.get("name")
        if name is not None and not isinstance(name, str):
            raise ConfigError("domain `name` must be a string")
        return cls([_attribute(a, i) for i, a in enumerate(attrs)], name=name)

    @classmethod
    def from_json_file(cls, path: str | os.PathLike[str]) -> Domain:
        """Read a domain file (v1 or a Liu et al. size map)."""
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
        except OSError as exc:
            raise ConfigError(
                f"cannot read domain file {os.fspath(path)!r}: {exc.strerror}"
            ) from None
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"domain file {os.fspath(path)!r} is not valid JSON (line {exc.lineno})"
            ) from None
        return cls.from_dict(raw)

    def to_dict(self) -> dict[str, Any]:
        """The v1 form; ``Domain.from_dict(dom.to_dict())`` equals ``dom``."""
        out: dict[str, Any] = {"version": DOMAIN_VERSION,
                               "attributes": [a.to_dict() for a in self._attrs]}
        if self.name is not None:
            out["name"] = self.name
        return out

    # -- properties -----------------------------------------------------------------------

    @property
    def attributes(self) -> tuple[str, ...]:
        """Attribute names in column order."""
        return tuple(a.name for a in self._attrs)

    @property
    def sizes(self) -> tuple[int, ...]:
        """|X_i| for every attribute, in column order."""
        return tuple(a.size for a in self._attrs)

    @property
    def n_cells(self) -> int:
        """|X| = Π |X_i| (a Python int, may be huge)."""
        return math.prod(self.sizes)

    def digest(self) -> str:
        """Public identifier of the domain: SHA-256 (first 16 hex) of its canonical JSON."""
        body = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(body).hexdigest()[:16]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Domain) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(self.digest())

    def __repr__(self) -> str:
        return f"Domain({len(self._attrs)} attributes, sizes={self.sizes})"

    # -- codec ----------------------------------------------------------------------------

    def _code(self, i: int, value: object) -> int | str:
        """The code of ``value`` for attribute i, or a reason (naming no value)."""
        attr, labels = self._attrs[i], self._labels[i]
        if labels is not None and isinstance(value, str):
            code = labels.get(value)
            return f"attribute '{attr.name}': unknown category" if code is None else code
        if isinstance(value, str) and labels is None:
            text = value.strip()
            if not text.lstrip("-").isdigit():
                return f"attribute '{attr.name}': must be an integer code"
            value = int(text)
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            return f"attribute '{attr.name}': must be a category label or an integer code"
        if not 0 <= int(value) < attr.size:
            return f"attribute '{attr.name}': code out of range [0, {attr.size})"
        return int(value)

    def encode(self, records: Sequence[Any]) -> tuple[np.ndarray, list[str | None]]:
        """Codes of the valid records, in order, and one reason (None if valid) per record.

        Values are category labels (attributes with ``categories``) or integer codes (any
        attribute; decimal strings count as codes for attributes declared by ``size``).
        Fields not in the domain are ignored. Reasons never contain a value.
        """
        rows: list[list[int]] = []
        reasons: list[str | None] = []
        for record in records:
            if not isinstance(record, Mapping):
                reasons.append("record must be a mapping from attribute name to value")
                continue
            row: list[int] = []
            reason: str | None = None
            for i, attr in enumerate(self._attrs):
                if attr.name not in record or record[attr.name] is None:
                    reason = f"attribute '{attr.name}': missing"
                    break
                code = self._code(i, record[attr.name])
                if isinstance(code, str):
                    reason = code
                    break
                row.append(code)
            reasons.append(reason)
            if reason is None:
                rows.append(row)
        codes = np.array(rows, dtype=np.int64).reshape(len(rows), len(self._attrs))
        return codes, reasons

    def check_codes(self, codes: np.ndarray) -> np.ndarray:
        """``codes`` as an (n, p) int64 array inside the domain, or SchemaError."""
        arr = np.asarray(codes)
        if arr.ndim != 2 or arr.shape[1] != len(self._attrs) or arr.dtype.kind not in "iu":
            raise SchemaError(
                f"codes must be an integer array of shape (n, {len(self._attrs)}); got "
                f"{arr.dtype} {arr.shape}: encode records with Domain.encode"
            )
        arr = arr.astype(np.int64, copy=False)
        if arr.size:
            bad = (arr < 0) | (arr >= np.asarray(self.sizes, dtype=np.int64))
            if bad.any():
                column = int(np.flatnonzero(bad.any(axis=0))[0])
                attr = self._attrs[column]
                raise SchemaError(
                    f"attribute '{attr.name}': code out of range [0, {attr.size}); "
                    "encode records with Domain.encode"
                )
        return arr

    def decode(self, codes: np.ndarray) -> list[dict[str, Any]]:
        """Records (labels for categorical attributes, integer codes otherwise)."""
        arr = self.check_codes(codes)
        columns = []
        for j, attr in enumerate(self._attrs):
            col = arr[:, j].tolist()
            columns.append([attr.categories[c] for c in col] if attr.categories else col)
        names = self.attributes
        return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)] \
            if columns and arr.shape[0] else []
