"""Contribution bounding for the privacy unit "user" (docs/privacy.md P15).

Layer: core. :mod:`~dpsynth.bounding.ids` turns a declared user id into a 128-bit keyed hash
(SipHash-2-4 under subkeys of the run key); :mod:`~dpsynth.bounding.table` keeps each user's
counted records and admits the first k of each user (and at most c per step), deterministically;
:mod:`~dpsynth.bounding.records` reads a schema's declared user id column.
"""

from __future__ import annotations

from dpsynth.bounding.ids import (
    MAX_ID_BYTES,
    UserHasher,
    UserKeys,
    canonical_id,
    canonical_ids,
    id_reason,
)
from dpsynth.bounding.records import split_user_records
from dpsynth.bounding.table import ContributionBounds, Resolver, UserCounts
from dpsynth.params import MAX_CONTRIBUTIONS

__all__ = [
    "MAX_CONTRIBUTIONS", "MAX_ID_BYTES", "ContributionBounds", "Resolver", "UserCounts",
    "UserHasher", "UserKeys", "canonical_id", "canonical_ids", "id_reason", "split_user_records",
]
