"""A release: the consistent leaf counts of one tick and the public recipe for its points.

Layer: core. docs/design.md D17: the compact form (leaf counts + a public placement seed) is what is
published; the points inside each leaf are a deterministic function of (placement seed, leaf
index, point index) and never of the data (HVZ Alg 1 "Output"; docs/algorithms.md A.5.5, C.11), so
any consumer that holds a release materialises exactly the same t points. The placement seed is
public: it is a ChaCha20 key for *placement* only, derived from the run key by HMAC, so it
reveals nothing about the noise key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

from dpsynth._types import Counts, Points
from dpsynth.errors import ConfigError
from dpsynth.noise import KeyedNoise
from dpsynth.params import PARAMS
from dpsynth.release.framing import is_int
from dpsynth.tree import MAX_TREE_DEPTH, leaf_bounds

#: Version of the release layout (metadata keys, Morton leaf order, placement rule).
RELEASE_SCHEMA_VERSION = 1
PLACEMENTS = PARAMS["placement"].values


def place_points(
    leaf_counts: Counts, *, d: int, depth: int, placement: str, placement_seed: bytes
) -> Points:
    """Materialise sum(leaf_counts) points in [0,1]^d, leaf by leaf in Morton order.

    ``uniform``: point k of leaf c is ``lower + u·(upper − lower)`` with u the uniforms at
    addresses (("place", depth), stream c, events k·d … k·d + d − 1) of ``placement_seed``.
    ``centre``: every point sits at its leaf's centre.

    >>> pts = place_points(np.array([2, 0, 1, 0]), d=2, depth=2, placement="centre",
    ...                    placement_seed=bytes(32))
    >>> pts.tolist()
    [[0.25, 0.25], [0.25, 0.25], [0.75, 0.25]]
    """
    counts = np.asarray(leaf_counts, dtype=np.int64)
    if placement not in PLACEMENTS:
        raise ValueError(f"placement ({placement!r}) must be one of {PLACEMENTS}")
    if counts.size != 1 << depth or (counts.size and counts.min() < 0):
        raise ValueError("leaf_counts must hold 2^depth non-negative counts")
    occupied = np.flatnonzero(counts)  # bounds once per non-empty leaf, then repeated
    lower, upper = leaf_bounds(occupied, d=d, depth=depth)
    per_leaf = counts[occupied]
    lower, upper = np.repeat(lower, per_leaf, axis=0), np.repeat(upper, per_leaf, axis=0)
    if placement == "centre":
        return (lower + upper) / 2
    leaves = np.repeat(occupied, per_leaf)
    first = np.cumsum(per_leaf) - per_leaf  # index of each leaf's first point
    within = np.arange(leaves.size, dtype=np.int64) - np.repeat(first, per_leaf)
    events = (within[:, None] * d + np.arange(d)).reshape(-1)
    streams = np.repeat(leaves, d)
    u = KeyedNoise(placement_seed).uniform_at(("place", depth), streams, events)
    u = u.reshape(-1, d)
    points: Points = lower + np.minimum(u, np.nextafter(1.0, 0.0)) * (upper - lower)
    return points


class _DenseCounts:
    """The ``leaf_counts`` field: given, or built from ``occupied`` on first access.

    A release of depth 20 has 2^20 counts (8 MiB); the worker encodes releases from their
    occupied leaves and never needs the dense array, so it is never allocated there.
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = f"_{name}"

    @overload
    def __get__(self, release: None, owner: type | None = None) -> None: ...
    @overload
    def __get__(self, release: Release, owner: type | None = None) -> Counts: ...
    def __get__(self, release: Release | None, owner: type | None = None) -> Counts | None:
        if release is None:
            return None  # the field's default: built from ``occupied``
        counts = release.__dict__.get(self._slot)
        if counts is None and release.occupied is not None:
            cells, values = release.occupied
            counts = np.zeros(1 << release.depth, np.int64)
            counts[cells] = values
            release.__dict__[self._slot] = counts
        return counts

    def __set__(self, release: Release, counts: Counts | None) -> None:
        release.__dict__[self._slot] = counts


@dataclass(frozen=True, eq=False)
class Release:
    """One synthetic dataset of exactly ``t`` points (HVZ Alg 1 output Y_t), in compact form.

    Attributes
    ----------
    t
        Records accepted so far; also the number of points.
    depth
        Depth of the leaves (|θ| = depth); ``leaf_counts`` has 2^depth entries, Morton order.
    leaf_counts
        Consistent, non-negative leaf counts N̂_θ summing to t (the privacy object).
    metadata
        Public description: ε, neighbour notion, schedule and parameters, d, sequence, ….
    placement_seed
        Public 32-byte seed of the data-independent positions inside leaves.
    """

    t: int
    depth: int
    leaf_counts: _DenseCounts = _DenseCounts()  # reads as Counts; None: from occupied
    metadata: dict[str, Any] = field(default_factory=dict)
    placement_seed: bytes = bytes(32)
    #: The same counts, sparse: (occupied leaf indices ascending, their counts), when the
    #: synthesizer had them; ``leaf_counts`` may then be None and is built on first access.
    occupied: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    @property
    def d(self) -> int:
        """Dimension of the points."""
        return int(self.metadata["d"])

    @property
    def sequence(self) -> int:
        """The release's number in its partition (1, 2, …)."""
        return int(self.metadata["sequence"])

    @property
    def points(self) -> Points:
        """The t synthetic points in [0,1]^d (materialised on each access)."""
        return place_points(
            self.leaf_counts,
            d=self.d,
            depth=self.depth,
            placement=str(self.metadata.get("placement", "uniform")),
            placement_seed=self.placement_seed,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Release):
            return NotImplemented
        return (
            self.t == other.t
            and self.depth == other.depth
            and np.array_equal(self.leaf_counts, other.leaf_counts)
            and self.metadata == other.metadata
            and self.placement_seed == other.placement_seed
        )

    __hash__ = None  # type: ignore[assignment]  # unhashable (__eq__ compares the arrays)


def check_release(release: Release) -> tuple[np.ndarray, int]:
    """The release's leaf counts as int64 and its dimension, or ConfigError (before encoding)."""
    cells, values, d = occupied_leaves(release)
    counts = np.zeros(1 << release.depth, np.int64)
    counts[cells] = values
    return counts, d


def occupied_leaves(release: Release) -> tuple[np.ndarray, np.ndarray, int]:
    """(occupied leaf indices ascending, their int64 counts, d), or ConfigError.

    One pass over the 2^depth counts (a release of depth 20 is 8 MiB of them): the checks
    that counts are non-negative and sum to t need only the non-zero ones.
    """
    if not isinstance(release, Release):
        raise ConfigError(f"release ({type(release).__name__}) must be a dpsynth Release")
    depth, t = release.depth, release.t
    if not is_int(depth) or not 0 <= depth <= MAX_TREE_DEPTH:
        raise ConfigError(f"release depth ({depth!r}) must be an integer in [0, 63]")
    if not is_int(t) or t < 0:
        raise ConfigError(f"release t ({t!r}) must be an integer >= 0")
    d = release.metadata.get("d") if isinstance(release.metadata, Mapping) else None
    if not is_int(d) or d < 1:
        raise ConfigError(f"release metadata 'd' ({d!r}) must be an integer >= 1")
    if not isinstance(release.placement_seed, bytes | bytearray):
        raise ConfigError("release placement_seed must be bytes")
    if release.occupied is not None:
        cells, values = (np.asarray(a, np.int64) for a in release.occupied)
        if cells.shape != values.shape or cells.ndim != 1 or cells.size and (
                cells[0] < 0 or cells[-1] >= 1 << depth
                or np.any(cells[1:] <= cells[:-1]) or values.min() <= 0):
            raise ConfigError("release occupied leaves must be ascending cells with counts > 0")
    else:
        counts = np.asarray(release.leaf_counts)
        if counts.shape != (1 << depth,) or counts.dtype.kind not in "iu":
            raise ConfigError(
                f"release leaf_counts (shape {counts.shape}, dtype {counts.dtype}) must be "
                f"2^depth = {1 << depth} integers"
            )
        cells = np.flatnonzero(counts)
        values = counts[cells].astype(np.int64)
    if values.size and (values.min() < 0 or int(values.sum(dtype=np.uint64)) != t) or (
            not values.size and t != 0):
        # privacy: the message names t only, never a count
        raise ConfigError(f"release leaf_counts must be non-negative and sum to t ({t})")
    return cells, values, int(d)
