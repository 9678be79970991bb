"""The declared domain of the records: named numeric columns with bounds, mapped to [0,1]^d.

Layer: core. A :class:`Schema` is a tuple of :class:`Column` s with declared intervals
[lower, upper] (``schemas/record-schema.v1.json``), never learned from the data: a
data-dependent domain would leak. ``to_unit`` maps records affinely onto [0,1]^d, ``from_unit``
back. docs/design.md D11: a value outside its bounds is clipped and *counted*
(:class:`ClipReport`, an operational metric, never released); a missing field, a non-numeric
value, NaN or ±inf rejects the record (``to_unit`` raises :class:`~dpsynth.errors.SchemaError`,
``split_valid`` returns the rejects with a reason naming the index, field and rule, never the
value).

>>> schema = Schema.from_dict({"version": 1, "columns": [
...     {"name": "lat", "lower": 40.5, "upper": 40.95},
...     {"name": "lon", "lower": -74.3, "upper": -73.7}]})
>>> points, clips = schema.to_unit([{"lat": 40.725, "lon": -74.0}, {"lat": 41.2, "lon": -74.3}])
>>> points.round(6).tolist(), clips.per_column, clips.total
([[0.5, 0.5], [1.0, 0.0]], {'lat': 1, 'lon': 0}, 1)
>>> schema.records_from_unit(points[:1])
[{'lat': 40.725, 'lon': -74.0}]
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpsynth._types import Points
from dpsynth.clipping import ClipReport
from dpsynth.errors import ConfigError, SchemaError

__all__ = ["ClipReport", "Column", "Schema", "SCHEMA_VERSIONS"]

#: Versions of the schema file format this module reads (schemas/record-schema.v1.json).
SCHEMA_VERSIONS = (1,)

_SCHEMA_KEYS = {"version", "columns", "name", "user_column", "$schema"}
_COLUMN_KEYS = {"name", "lower", "upper"}
_MISSING = object()  # marks a field absent from a record
_NONFINITE = "field {!r} must be finite (NaN and ±inf are rejected)"


def _is_real(value: object) -> bool:
    """True for int/float and numpy numbers; False for bool (a category, not a quantity)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)


@dataclass(frozen=True)
class Column:
    """One numeric column of the domain, with its declared closed interval [lower, upper].

    Parameters
    ----------
    name
        Field name in the records (non-empty).
    lower, upper
        Finite bounds with lower < upper; values outside are clipped and counted.

    >>> Column("age", 90, 18)
    Traceback (most recent call last):
    ...
    dpsynth.errors.ConfigError: column 'age': bounds (90, 18) must satisfy lower < upper; ...
    """

    name: str
    lower: float
    upper: float

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"column name ({self.name!r}) must be a non-empty string")
        for key in ("lower", "upper"):
            value = getattr(self, key)
            if not _is_real(value) or not math.isfinite(value):
                raise ConfigError(
                    f"column {self.name!r}: {key} ({value!r}) must be a finite number; "
                    "declare the domain's bounds in the schema"
                )
        if not self.lower < self.upper:
            raise ConfigError(
                f"column {self.name!r}: bounds ({self.lower!r}, {self.upper!r}) must satisfy "
                "lower < upper; fix or swap them in the schema"
            )
        if not math.isfinite(float(self.upper) - float(self.lower)):
            raise ConfigError(
                f"column {self.name!r}: bounds ({self.lower!r}, {self.upper!r}) must have a "
                "finite width upper - lower; narrow them"
            )
        object.__setattr__(self, "lower", float(self.lower))
        object.__setattr__(self, "upper", float(self.upper))


@dataclass(frozen=True)
class Schema:
    """The declared domain: columns in order (point coordinate i is column i) and a version.

    Parameters
    ----------
    columns
        One :class:`Column` per coordinate, names unique, at least one.
    version
        Schema file format version (only 1 exists).
    name
        Optional human-readable name of the domain.
    user_column
        Optional field holding each record's user id (a string or an integer, not a
        coordinate): the privacy unit "user" bounds and protects each user's records
        (docs/privacy.md P15). Declared, never inferred from values.
    """

    columns: tuple[Column, ...]
    version: int = 1
    name: str | None = None
    user_column: str | None = None

    def __post_init__(self) -> None:
        columns = self.columns
        if isinstance(columns, list):
            columns = tuple(columns)
            object.__setattr__(self, "columns", columns)
        if not isinstance(columns, tuple) or not all(isinstance(c, Column) for c in columns):
            raise ConfigError("schema `columns` must be a tuple of Column")
        if not columns:
            raise ConfigError("schema `columns` (empty) must declare at least one column")
        names = [c.name for c in columns]
        for name in names:
            if names.count(name) > 1:
                raise ConfigError(f"column name {name!r} must be unique; it is declared twice")
        if self.user_column is not None and (not isinstance(self.user_column, str)
                                             or not self.user_column or self.user_column in names):
            raise ConfigError(f"schema `user_column` ({self.user_column!r}) must name a field "
                              "that is not a coordinate column (the user id), or be absent")
        if isinstance(self.version, bool) or self.version not in SCHEMA_VERSIONS:
            raise ConfigError(
                f"schema `version` ({self.version!r}) must be one of {SCHEMA_VERSIONS}; "
                "this dpsynth reads schema format version 1 (schemas/record-schema.v1.json)"
            )
        if self.name is not None and not isinstance(self.name, str):
            raise ConfigError(f"schema `name` ({self.name!r}) must be a string or absent")

    # ---- construction and serialisation -------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schema:
        """Build a schema from its file form ``{"version": 1, "columns": [{name, lower, upper}]}``.

        Unknown keys are refused (a typo such as ``"uper"`` must not pass silently).
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"schema ({type(data).__name__}) must be a mapping")
        unknown = sorted(set(data) - _SCHEMA_KEYS, key=str)
        if unknown:
            raise ConfigError(
                f"schema keys {unknown} must be among {sorted(_SCHEMA_KEYS)}; remove them"
            )
        if "columns" not in data:
            raise ConfigError("schema must have a `columns` list; add one entry per column")
        raw_columns = data["columns"]
        if not isinstance(raw_columns, list | tuple):
            raise ConfigError(
                f"schema `columns` ({type(raw_columns).__name__}) must be a list of objects"
            )
        columns = []
        for i, raw in enumerate(raw_columns):
            if not isinstance(raw, Mapping):
                raise ConfigError(f"schema column {i} ({type(raw).__name__}) must be an object")
            keys = set(raw)
            if keys != _COLUMN_KEYS:
                missing, extra = sorted(_COLUMN_KEYS - keys), sorted(keys - _COLUMN_KEYS, key=str)
                raise ConfigError(
                    f"schema column {i}: keys must be exactly {sorted(_COLUMN_KEYS)} "
                    f"(missing {missing}, unknown {extra})"
                )
            columns.append(Column(raw["name"], raw["lower"], raw["upper"]))
        version = data.get("version", 1)
        if not isinstance(version, int):
            raise ConfigError(f"schema `version` ({version!r}) must be an integer")
        return cls(tuple(columns), version=version, name=data.get("name"),
                   user_column=data.get("user_column"))

    def to_dict(self) -> dict[str, Any]:
        """The file form (JSON-ready); ``Schema.from_dict(s.to_dict()) == s``."""
        out: dict[str, Any] = {"version": self.version}
        if self.name is not None:
            out["name"] = self.name
        out["columns"] = [
            {"name": c.name, "lower": c.lower, "upper": c.upper} for c in self.columns
        ]
        if self.user_column is not None:  # absent otherwise: older states' bound config
            out["user_column"] = self.user_column
        return out

    @classmethod
    def from_json_file(cls, path: str | os.PathLike[str]) -> Schema:
        """Read a schema file (JSON, format of ``schemas/record-schema.v1.json``)."""
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(
                f"schema file {os.fspath(path)!r} must be valid JSON: {e.msg} at line {e.lineno}"
            ) from None
        return cls.from_dict(data)

    @property
    def d(self) -> int:
        """Dimension of the points (number of columns)."""
        return len(self.columns)

    @property
    def names(self) -> tuple[str, ...]:
        """Column names in coordinate order."""
        return tuple(c.name for c in self.columns)

    # ---- records -> points ----------------------------------------------------------------

    def to_unit(
        self, records: Sequence[Mapping[str, Any]] | np.ndarray
    ) -> tuple[Points, ClipReport]:
        """Map a batch of records to points in [0,1]^d, clipping out-of-bounds values.

        Parameters
        ----------
        records
            A sequence of mappings (extra fields are ignored), or an n×d numeric array with the
            columns in schema order.

        Returns
        -------
        points, clip_report
            The n×d points (float64) and the clipped values per column.

        Raises
        ------
        SchemaError
            For the first invalid record (missing field, non-numeric, NaN or ±inf), naming its
            index, the field and the rule, never the value; or for an array of the wrong shape.
        """
        points, report, rejects = self.split_valid(records)
        if rejects:
            index, reason = rejects[0]
            raise SchemaError(
                f"record {index}: {reason}; fix the producer, or use split_valid() to "
                "dead-letter invalid records"
            )
        return points, report

    def split_valid(
        self, records: Sequence[Mapping[str, Any]] | np.ndarray
    ) -> tuple[Points, ClipReport, list[tuple[int, str]]]:
        """Like :meth:`to_unit`, but invalid records are returned instead of raised.

        Returns
        -------
        points, clip_report, rejects
            Points of the valid records (in input order), their clip counts, and one
            ``(index, reason)`` per invalid record, for the dead-letter topic. A reason names the
            field and the rule broken, never the value.

        >>> schema = Schema((Column("x", 0, 10),))
        >>> pts, clips, rejects = schema.split_valid([{"x": 5}, {"y": 1}, {"x": float("nan")}])
        >>> pts.tolist()
        [[0.5]]
        >>> for index, reason in rejects:
        ...     print(index, reason)
        1 field 'x' is missing
        2 field 'x' must be finite (NaN and ±inf are rejected)
        """
        values, reasons = self._extract(records)
        valid = np.array([r is None for r in reasons], dtype=bool)
        rejects = [(i, r) for i, r in enumerate(reasons) if r is not None]
        values = values[valid]
        lower = np.array([c.lower for c in self.columns])
        upper = np.array([c.upper for c in self.columns])
        outside = (values < lower) | (values > upper)
        report = ClipReport(self.names, tuple(int(k) for k in outside.sum(axis=0)))
        # monotone rounding keeps in-bounds values in [0,1]; the clip handles the rest
        points = np.clip((values - lower) / (upper - lower), 0.0, 1.0)
        return points, report, rejects

    def _extract(
        self, records: Sequence[Mapping[str, Any]] | np.ndarray
    ) -> tuple[np.ndarray, list[str | None]]:
        """n×d float64 values (NaN where invalid) and a reason (or None) per record."""
        d = self.d
        if isinstance(records, np.ndarray):
            if records.ndim != 2 or records.shape[1] != d:
                raise SchemaError(
                    f"records array shape {records.shape} must be (n, {d}): one column per "
                    f"schema column {self.names}, in that order"
                )
            if records.dtype.kind in "iuf":
                values = records.astype(np.float64)
                bad = ~np.isfinite(values)
                reasons: list[str | None] = [None] * len(values)
                for i, j in zip(*np.nonzero(bad), strict=True):
                    if reasons[i] is None:
                        reasons[i] = _NONFINITE.format(self.columns[j].name)
                return values, reasons
            if records.dtype.kind != "O":
                raise SchemaError(
                    f"records array dtype ({records.dtype}) must be numeric (int or float)"
                )
            columns = [records[:, j].tolist() for j in range(d)]
            reasons = [None] * len(records)
        else:
            if isinstance(records, str | bytes | Mapping):
                raise SchemaError(
                    f"records ({type(records).__name__}) must be a sequence of mappings or an "
                    "(n, d) array; wrap a single record in a list"
                )
            records = list(records)
            if set(map(type, records)) <= {dict}:  # plain dicts (msgpack's): no ABC checks
                reasons = [None] * len(records)
                columns = [[r.get(name, _MISSING) for r in records] for name in self.names]
            else:
                reasons = [
                    None if isinstance(r, Mapping) else "record must be a mapping of field to "
                    "number" for r in records
                ]
                columns = [
                    [r.get(c.name, _MISSING) if isinstance(r, Mapping) else 0.0 for r in records]
                    for c in self.columns
                ]
        values = np.full((len(reasons), d), np.nan)
        for j, column in enumerate(columns):
            _fill_column(values[:, j], column, self.columns[j].name, reasons)
        return values, reasons

    # ---- points -> records ----------------------------------------------------------------

    def from_unit(self, points: Points) -> np.ndarray:
        """Map points in [0,1]^d back to the original units (n×d, columns in schema order).

        The inverse of :meth:`to_unit` on in-bounds values (to within rounding, ~1e-16 relative
        to the bounds); the result is kept inside [lower, upper].
        """
        points = np.asarray(points, dtype=np.float64)
        if points.ndim != 2 or points.shape[1] != self.d:
            raise SchemaError(
                f"points shape {points.shape} must be (n, {self.d}) for schema columns {self.names}"
            )
        lower = np.array([c.lower for c in self.columns])
        upper = np.array([c.upper for c in self.columns])
        values: np.ndarray = np.clip(lower + points * (upper - lower), lower, upper)
        return values

    def records_from_unit(self, points: Points) -> list[dict[str, float]]:
        """Map points back to records: one ``{name: value}`` dict of Python floats per point."""
        names = self.names
        return [dict(zip(names, row, strict=True)) for row in self.from_unit(points).tolist()]


def _fill_column(out: np.ndarray, column: list[Any], name: str, reasons: list[str | None]) -> None:
    """Convert one column's values into ``out``; give each still-valid bad record its reason."""
    if set(map(type, column)) <= {float, int}:  # fast path: plain numbers (bool is not int)
        try:
            out[:] = column
        except OverflowError:  # an int beyond float64: handled value by value below
            pass
        else:
            for i in np.nonzero(~np.isfinite(out))[0].tolist():
                reasons[i] = reasons[i] or _NONFINITE.format(name)
            return
    for i, v in enumerate(column):
        if reasons[i] is not None:  # keep the first rule broken, in column order
            continue
        if v is _MISSING:
            reasons[i] = f"field {name!r} is missing"
        elif not _is_real(v):
            reasons[i] = f"field {name!r} must be a number, not {type(v).__name__}"
        else:
            try:
                out[i] = float(v)
            except OverflowError:  # a finite int beyond float64: clipped like any other
                out[i] = np.finfo(np.float64).max * (1 if v > 0 else -1)
            if not math.isfinite(out[i]):
                reasons[i] = _NONFINITE.format(name)
