"""Release statistics for the threshold tests, aimed at the changed record (issue 13 (b)).

Layer: audit. Each statistic is a number per output, read from what is published; the ε lower
bound of :mod:`dpsynth.audit.stats` asks how well a threshold on it tells D from D′. They aim at
the components a change of one record reaches:

``size@last``, ``size@change``
    the released size (t, the table's rows) of the last release and of the release that ends
    the changed record's step — the size counters (noisy under add/remove, public under
    replacement, where they must not move at all);
``mass@last``, ``mass@change``
    the released mass in the cell of depth :data:`PROBE_DEPTH` around the changed record
    (for tables: rows equal to it) — the leaf counts, PMM levels, PSMM cells, measurements;
``support@last``
    the occupied cells of the last release inside that cell — how finely the private
    partition (PrivTree decisions, PMM's depth) resolved the record's region;
``depth@last``
    the depth of the last release — the tree's shape (PrivTree decisions, PMM's depth from a
    noisy size).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpsynth.audit.inputs import Neighbour
from dpsynth.release import Release
from dpsynth.tree import route

#: Depth of the cell around the changed record whose mass is measured (1/4 of each side, d = 2).
PROBE_DEPTH = 4


def cell_mass(counts: np.ndarray, depth: int, record: np.ndarray,
              probe_depth: int = PROBE_DEPTH) -> tuple[float, int]:
    """(mass, occupied cells) of leaf counts at ``depth`` (Morton order) in the probe cell.

    A release shallower than the probe spreads its leaf's mass evenly (as its points are).

    >>> cell_mass(np.array([0, 0, 1, 4]), 2, np.array([0.9, 0.9]), 1)
    (5.0, 2)
    """
    counts = np.asarray(counts)
    point = np.asarray(record, np.float64)[None, :]
    if depth >= probe_depth:
        cell = int(route(point, depth=probe_depth)[0])
        inside = counts[cell << (depth - probe_depth):(cell + 1) << (depth - probe_depth)]
        return float(inside.sum()), int(np.count_nonzero(inside))
    leaf = int(route(point, depth=depth)[0])
    return float(counts[leaf]) / (1 << (probe_depth - depth)), int(counts[leaf] != 0)


def points_mass(points: np.ndarray, record: np.ndarray,
                probe_depth: int = PROBE_DEPTH) -> float:
    """Synthetic points in the probe cell of ``record``."""
    if len(points) == 0:
        return 0.0
    cells = route(np.clip(np.asarray(points, np.float64), 0.0, 1.0), depth=probe_depth)
    target = route(np.asarray(record, np.float64)[None, :], depth=probe_depth)[0]
    return float(np.count_nonzero(cells == target))


def release_statistics(releases: Sequence[Release], probe: Neighbour) -> dict[str, float]:
    """Statistics of a continual run's point releases (one per step)."""
    if not releases:
        return {"releases": 0.0}
    last = releases[-1]
    at = releases[min(probe.step, len(releases)) - 1]
    mass_last, support = cell_mass(last.leaf_counts, last.depth, probe.record)
    mass_at, _ = cell_mass(at.leaf_counts, at.depth, probe.record)
    return {"size@last": float(last.t), "size@change": float(at.t), "mass@last": mass_last,
            "mass@change": mass_at, "support@last": float(support),
            "depth@last": float(last.depth)}


def leaves_statistics(depth: int, counts: np.ndarray, probe: Neighbour) -> dict[str, float]:
    """Statistics of one offline release in compact form (leaf counts at ``depth``)."""
    mass, support = cell_mass(counts, depth, probe.record)
    return {"size": float(np.sum(counts)), "mass": mass, "support": float(support),
            "depth": float(depth)}


def points_statistics(points: np.ndarray, probe: Neighbour) -> dict[str, float]:
    """Statistics of one synthetic point set (e.g. lowdim's, or a synthetic CSV)."""
    return {"size": float(len(points)), "mass": points_mass(points, probe.record)}


def table_statistics(tables: Sequence[np.ndarray], probe: Neighbour) -> dict[str, float]:
    """Statistics of a tabular run's synthetic tables (one per step): rows, and rows equal to
    the changed record (all attributes, and its first two — the 2-way marginal it is rare in)."""
    if not tables:
        return {"tables": 0.0}
    last = np.asarray(tables[-1])
    at = np.asarray(tables[min(probe.step, len(tables)) - 1])
    record = np.asarray(probe.record)

    def matches(table: np.ndarray, width: int) -> float:
        if table.size == 0:
            return 0.0
        return float(np.count_nonzero((table[:, :width] == record[:width]).all(axis=1)))

    return {"rows@last": float(len(last)), "rows@change": float(len(at)),
            "match@last": matches(last, record.size), "match@change": matches(at, record.size),
            "pair@last": matches(last, 2)}
