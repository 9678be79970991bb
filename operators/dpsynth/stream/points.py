"""The worker's materialised points: each release's points beside it (``DPSYNTH_POINTS_FORMAT``).

Layer: adapter. With ``DPSYNTH_POINTS_FORMAT=arrow`` the processor produces, right after a
release's records and with the same key, its points in the schema's units and column names as
Arrow IPC streams (:mod:`dpsynth.release.points_arrow`; schemas/README.md "Materialised points")
into ``DPSYNTH_POINTS_TOPIC``. A retried release gives byte-identical point records, so readers
drop them as duplicates like the release's own.

Privacy: post-processing of the release (the points every reader computes from it).
"""

from __future__ import annotations

from typing import Any

from dpsynth.release.points_arrow import encode_points
from dpsynth.stream.settings import WorkerConfig


def points_records(config: WorkerConfig, release: Any, partition: int) -> list[bytes]:
    """The release's point records for ``DPSYNTH_POINTS_TOPIC``, or none when the setting is
    "none" (and for the tabular engine, whose releases are rows already; refused at start)."""
    if config.points_format == "none" or config.schema is None:
        return []
    return encode_points(release, config.schema, run_id=config.run_id, partition=partition,
                         max_chunk_bytes=config.release_max_record_bytes)
