"""The audit's inputs: a public stream D in steps, and its neighbours D′ (issue 13).

Layer: audit. D is deterministic (a low-discrepancy blob, no random generator): ``steps``
public steps of ``per_step`` records each. Each neighbour D′ changes one record, chosen to be
as visible as possible — an *outlier* far from every record of D — and placed where a
record-counting clock would move the most:

* add/remove: the outlier added to the **first** step (an early insertion once shifted every
  later step boundary), the outlier added to the **last** step, and the **first** record of D
  removed (one record fewer: a clock that counts records ends one step fewer);
* replace: the first record replaced by the outlier, and the last record replaced by it.

:class:`Neighbour` carries the changed record and its step, so that statistics can aim at
them (the mass near the record, the release of its step).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Records of D: 12 public steps of 10 (120 records).
STEPS, PER_STEP = 12, 10
#: The outlier of point inputs: a corner no record of D comes near.
OUTLIER = 0.93
#: Domain of the table inputs, and their outlier: a value combination D never holds.
TABLE_SIZES = (3, 3, 2)
TABLE_OUTLIER = (2, 2, 1)


@dataclass(frozen=True)
class AuditInput:
    """Public steps of records: float points in [0,1]^d, or int codes of a table."""

    steps: tuple[np.ndarray, ...]
    #: The user of every record, per step (the privacy unit "user", P15); None otherwise.
    users: tuple[tuple[str, ...], ...] | None = None

    @property
    def records(self) -> np.ndarray:
        """All records in step order."""
        return np.concatenate(self.steps)

    @property
    def n(self) -> int:
        """Number of records."""
        return int(sum(len(s) for s in self.steps))

    @property
    def width(self) -> int:
        """d (points) or the number of attributes (tables)."""
        return int(self.steps[0].shape[1])

    @property
    def is_table(self) -> bool:
        """True for integer codes."""
        return self.steps[0].dtype.kind in "iu"


@dataclass(frozen=True)
class Neighbour:
    """D′ and what changed: ``record`` (added, removed or the replacement) in step ``step``
    (1-based)."""

    name: str
    data: AuditInput
    record: np.ndarray
    step: int


def _blob(n: int, d: int) -> np.ndarray:
    """n points of a Kronecker (R_d) low-discrepancy sequence in [0.3, 0.45]^d."""
    phi = 2.0
    for _ in range(32):  # the root of x^(d+1) = x + 1 (generalised golden ratio)
        phi = (1.0 + phi) ** (1.0 / (d + 1))
    alpha = (1.0 / phi) ** np.arange(1, d + 1)
    unit = (0.5 + np.outer(np.arange(1, n + 1), alpha)) % 1.0
    return 0.3 + 0.15 * unit


def point_input(d: int = 2, steps: int = STEPS, per_step: int = PER_STEP) -> AuditInput:
    """D for point entry points: ``steps`` steps of ``per_step`` points of a blob in [0,1]^d."""
    points = _blob(steps * per_step, d)
    return AuditInput(tuple(points[i * per_step:(i + 1) * per_step] for i in range(steps)))


def table_input(steps: int = STEPS, per_step: int = PER_STEP) -> AuditInput:
    """D for tabular entry points over :data:`TABLE_SIZES`; attribute a never takes the value
    2, so :data:`TABLE_OUTLIER` is unique to D′."""
    i = np.arange(steps * per_step)
    codes = np.stack([i % 2, (i * 7 // 2) % 3, (i // 5) % 2], axis=1).astype(np.int64)
    return AuditInput(tuple(codes[k * per_step:(k + 1) * per_step] for k in range(steps)))


def outlier_of(data: AuditInput) -> np.ndarray:
    """The changed record of the add and replace neighbours (one row)."""
    if data.is_table:
        return np.array([TABLE_OUTLIER], np.int64)
    return np.full((1, data.width), OUTLIER)


def _with_step(data: AuditInput, k: int, rows: np.ndarray) -> AuditInput:
    steps = list(data.steps)
    steps[k] = rows
    return AuditInput(tuple(steps))


def neighbours(data: AuditInput, notion: str) -> list[Neighbour]:
    """The neighbours D′ of D under ``notion`` (module docstring)."""
    x = outlier_of(data)
    last = len(data.steps) - 1
    first_row = data.steps[0][:1]
    if notion == "add_remove":
        return [
            Neighbour("outlier added to step 1", _with_step(
                data, 0, np.concatenate([data.steps[0], x])), x[0], 1),
            Neighbour(f"outlier added to step {last + 1}", _with_step(
                data, last, np.concatenate([data.steps[last], x])), x[0], last + 1),
            Neighbour("first record removed", _with_step(data, 0, data.steps[0][1:]),
                      first_row[0], 1),
        ]
    if notion == "replace":
        return [
            Neighbour("first record replaced by the outlier", _with_step(
                data, 0, np.concatenate([x, data.steps[0][1:]])), x[0], 1),
            Neighbour("last record replaced by the outlier", _with_step(
                data, last, np.concatenate([data.steps[last][:-1], x])), x[0], last + 1),
        ]
    raise ValueError(f"notion ({notion!r}) must be 'replace' or 'add_remove'")
