"""What ``dpsynth view`` shows: the latest release of each partition, their merge, the history.

Layer: adapter (no I/O). :class:`ViewState` takes checked, first-seen releases
(:class:`~dpsynth.client.ReleaseEvent` s of a :class:`~dpsynth.client.ReleaseTracker`) from a
follower thread and gives the page one JSON document (:meth:`ViewState.to_json`): per input
partition its latest sequence, t, public privacy metadata and a heat map of its points in the
schema's units; the merge of the partitions (their union, as
:meth:`~dpsynth.client.ReleaseTracker.merge_latest`); the size t of every release seen over
time; the counts of refused releases.

Heat maps are histograms of :attr:`Release.points` mapped by the schema (post-processing of
public releases), computed once per release when a page first asks for them, on the schema's
bounds — never on the data's range — so that nothing but the releases decides a pixel.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpsynth.release import Release, ReleaseKey
from dpsynth.schema import Column, Schema

#: The privacy metadata shown per partition: (label, metadata key, default when absent).
PRIVACY_FIELDS = (
    ("epsilon", "epsilon", None),
    ("neighbours", "neighbours", "replace"),
    ("privacy_unit", "privacy_unit", "record"),
    ("mechanism", "schedule", None),
    ("key_fingerprint", "key_fingerprint", None),
    ("max_contributions", "max_contributions", None),
    ("worst_case_loss", "worst_case_loss", None),
)
#: Releases kept in the size history (the oldest are dropped beyond).
HISTORY_LIMIT = 5_000


def privacy_of(metadata: dict[str, Any]) -> dict[str, Any]:
    """The public privacy parameters of a release's metadata, by the page's labels."""
    return {label: metadata.get(key, default) for label, key, default in PRIVACY_FIELDS}


@dataclass
class _Latest:
    key: ReleaseKey
    release: Release
    seen: float
    heat: list[int] | None = field(default=None, repr=False)  # computed on first request


class ViewState:
    """The view's model, shared by a follower thread (:meth:`add`) and the HTTP server.

    ``schema`` gives the units, column names and bounds (without one: coordinates ``x0`` …
    in [0,1]); ``axes`` the two columns of the heat maps (one for d = 1); ``bins`` their
    resolution; ``run_id`` restricts the view to one run (else it follows the run of the most
    recent release).
    """

    def __init__(self, source: str, *, schema: Schema | None = None,
                 axes: tuple[str, ...] = (), bins: int = 64, run_id: str | None = None,
                 poll_ms: int = 1000, clock: Callable[[], float] = time.time) -> None:
        self.source = source
        self.schema = schema
        self.axes_names = tuple(axes)
        self.bins = int(bins)
        self.run_id = run_id
        self.poll_ms = int(poll_ms)
        self.clock = clock
        self.started = clock()
        self.latest: dict[tuple[str, int], _Latest] = {}
        self.history: list[dict[str, Any]] = []
        self.rejected = 0
        self.error: str | None = None
        self.version = 0
        self._current_run: str | None = run_id
        self._lock = threading.Lock()
        self._json: tuple[int, bytes] | None = None

    # -- the follower's side ---------------------------------------------------------------

    def add(self, key: ReleaseKey, release: Release) -> None:
        """One checked, first-seen release: history, and the partition's latest if newer."""
        if self.run_id is not None and key.run_id != self.run_id:
            return
        with self._lock:
            now = self.clock()
            self.history.append({"run_id": key.run_id, "partition": key.partition,
                                 "sequence": key.sequence, "t": int(release.t), "seen": now})
            del self.history[:-HISTORY_LIMIT]
            slot = (key.run_id, key.partition)
            current = self.latest.get(slot)
            if current is None or current.key.sequence < key.sequence:
                self.latest[slot] = _Latest(key, release, now)
                self._current_run = self.run_id or key.run_id
            self.version += 1

    def set_counts(self, *, rejected: int, error: str | None = None) -> None:
        """The follower's refused releases and its last error (None: reading)."""
        with self._lock:
            if (rejected, error) != (self.rejected, self.error):
                self.rejected, self.error = rejected, error
                self.version += 1

    # -- the page's side -------------------------------------------------------------------

    def to_json(self) -> bytes:
        """The page's document (built again only after a change)."""
        with self._lock:
            if self._json is None or self._json[0] != self.version:
                self._json = (self.version, json.dumps(
                    self._document(), separators=(",", ":"), allow_nan=False).encode())
            return self._json[1]

    def _columns(self, d: int) -> tuple[Column, ...]:
        if self.schema is not None:
            return self.schema.columns
        return tuple(Column(f"x{i}", 0.0, 1.0) for i in range(d))

    def _axes(self, columns: tuple[Column, ...]) -> list[int]:
        names = [c.name for c in columns]
        if self.axes_names:
            return [names.index(name) for name in self.axes_names]
        return [0, 1] if len(columns) > 1 else [0]

    def _document(self) -> dict[str, Any]:
        run = self._current_run
        shown = sorted((slot, item) for slot, item in self.latest.items() if slot[0] == run)
        d = shown[0][1].release.d if shown else (self.schema.d if self.schema else 2)
        columns = self._columns(d)
        axes = self._axes(columns)
        partitions: list[dict[str, Any]] = []
        for (_, partition), item in shown:
            if item.heat is None:
                item.heat = self._heat(item.release, columns, axes)
            partitions.append({
                "partition": partition, "sequence": item.key.sequence, "t": int(item.release.t),
                "seen": item.seen, "privacy": privacy_of(item.release.metadata),
                "depth": item.release.depth, "heat": item.heat,
            })
        merged = (np.sum([p["heat"] for p in partitions], axis=0).tolist() if partitions
                  else [0] * self._cells(axes))
        return {
            "version": self.version, "source": self.source, "run_id": run,
            "runs": sorted({r for r, _ in self.latest}), "poll_ms": self.poll_ms,
            "units": self.schema is not None,
            "columns": [{"name": c.name, "lower": c.lower, "upper": c.upper} for c in columns],
            "axes": axes, "bins": [self.bins, self.bins if len(axes) > 1 else 1],
            "partitions": partitions,
            "merged": {"t": sum(p["t"] for p in partitions), "partitions": len(partitions),
                       "heat": merged},
            "history": [h for h in self.history if h["run_id"] == run],
            "rejected": self.rejected, "error": self.error, "started": self.started,
            "now": self.clock(),
        }

    def _cells(self, axes: list[int]) -> int:
        return self.bins * (self.bins if len(axes) > 1 else 1)

    def _heat(self, release: Release, columns: tuple[Column, ...], axes: list[int]) -> list[int]:
        """Counts of the release's points (in units) on a bins × bins grid of the schema's
        bounds, row-major from the lowest y row (one row for a single axis)."""
        if release.d != len(columns):
            return [0] * self._cells(axes)  # another schema's release: nothing to place
        points = release.points
        if self.schema is not None:
            points = self.schema.from_unit(points)
        x = columns[axes[0]]
        if len(axes) == 1:
            counts, _ = np.histogram(points[:, axes[0]], bins=self.bins,
                                     range=(x.lower, x.upper))
            return [int(c) for c in counts]
        y = columns[axes[1]]
        counts, _, _ = np.histogram2d(points[:, axes[0]], points[:, axes[1]], bins=self.bins,
                                      range=[[x.lower, x.upper], [y.lower, y.upper]])
        return counts.T.astype(np.int64).reshape(-1).tolist()  # rows: y bins, lowest first
