"""The team's own code under test: where the synthetic points are busiest.

It takes records ``{column: value}`` — what the team's service reads from dpsynth's synthetic
topic through the consumer library — and counts them on a grid over the columns' ranges.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence


def busiest_cells(records: Iterable[Mapping[str, float]], *, columns: Sequence[str],
                  bounds: Mapping[str, tuple[float, float]], grid: int = 4,
                  top: int = 3) -> list[tuple[tuple[int, ...], int]]:
    """The ``top`` cells of a ``grid``-per-axis grid with the most records, busiest first."""
    counts: Counter[tuple[int, ...]] = Counter()
    for record in records:
        cell = []
        for name in columns:
            lower, upper = bounds[name]
            share = (record[name] - lower) / (upper - lower)
            cell.append(min(max(int(share * grid), 0), grid - 1))
        counts[tuple(cell)] += 1
    return counts.most_common(top)
