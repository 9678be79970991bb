"""Records with a declared user id column: valid points plus each valid record's canonical id.

Layer: core. The schema's ``user_column`` (``schemas/record-schema.v1.json``) names the field
holding each record's user; a record whose id is missing or not a string or an integer is
rejected like any invalid record (a reason naming the field and the rule, never the value), and
so is one whose point is invalid. Only valid records are bounded and counted (P15).

>>> from dpsynth.schema import Column, Schema
>>> schema = Schema((Column("x", 0, 10),), user_column="uid")
>>> points, clips, rejects, ids = split_user_records(
...     schema, [{"x": 5, "uid": "a"}, {"x": 1}, {"x": "?", "uid": 7}, {"x": 2, "uid": 7}])
>>> points.tolist(), ids, [i for i, _ in rejects]
([[0.5], [0.2]], [b'a', b'7'], [1, 2])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dpsynth._types import Points
from dpsynth.bounding.ids import canonical_id, id_reason
from dpsynth.clipping import ClipReport
from dpsynth.errors import ConfigError
from dpsynth.schema import Schema


def split_user_records(
    schema: Schema, records: Sequence[Any]
) -> tuple[Points, ClipReport, list[tuple[int, str]], list[bytes]]:
    """:meth:`Schema.split_valid` plus the user id: (points, clips, rejects, ids).

    ``ids`` holds the canonical id (:func:`~dpsynth.bounding.ids.canonical_id`) of every valid
    record, in the order of ``points``; ``rejects`` are ``(index, reason)`` in index order.
    """
    column = schema.user_column
    if column is None:
        raise ConfigError("the schema declares no user id column: add \"user_column\" to it "
                          "(or pass --user-column) for the privacy unit 'user'")
    records = list(records)
    ids = [canonical_id(r.get(column)) if isinstance(r, Mapping) else b"" for r in records]
    rejects = [(i, id_reason(column)) for i, v in enumerate(ids) if v is None]
    kept = [i for i, v in enumerate(ids) if v is not None]
    kept_ids = [v for v in ids if v is not None]  # kept_ids[j] is ids[kept[j]]
    points, clips, bad = schema.split_valid([records[i] for i in kept])
    bad_at = {j for j, _ in bad}
    rejects = sorted(rejects + [(kept[j], why) for j, why in bad])
    valid_ids = [v for j, v in enumerate(kept_ids) if j not in bad_at]
    return points, clips, rejects, valid_ids
