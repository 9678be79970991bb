"""Clip counts: how many values of a batch fell outside their declared bounds (a metric).

Layer: core. docs/design.md D11: a value outside its column's bounds is clipped and counted;
the count is an operational metric for the operator, never part of a release.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClipReport:
    """How many values of a batch were clipped to their bounds, per column (operational metric).

    Never part of a release (docs/design.md D11). ``total`` counts clipped *values*; a record
    clipped in two columns counts twice. Reports add up: ``report_a + report_b``.
    """

    columns: tuple[str, ...]
    counts: tuple[int, ...]

    @property
    def per_column(self) -> dict[str, int]:
        """Clipped values per column name."""
        return dict(zip(self.columns, self.counts, strict=True))

    @property
    def total(self) -> int:
        """Clipped values over all columns."""
        return sum(self.counts)

    def __add__(self, other: ClipReport) -> ClipReport:
        if not isinstance(other, ClipReport):
            return NotImplemented
        if other.columns != self.columns:
            raise ValueError(
                f"clip reports of columns {other.columns} and {self.columns} must match to add"
            )
        counts = tuple(a + b for a, b in zip(self.counts, other.counts, strict=True))
        return ClipReport(self.columns, counts)
