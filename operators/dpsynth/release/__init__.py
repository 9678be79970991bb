"""Releases: the in-memory model and the wire formats consumers read.

Layer: core (msgpack only). :mod:`~dpsynth.release.model` — :class:`Release` (consistent leaf
counts and a public placement seed) and placement; :mod:`~dpsynth.release.points_v1` — release
format v1 (header, bounded chunks, checksummed end); :mod:`~dpsynth.release.framing` — the
envelope all formats share; :mod:`~dpsynth.release.assembler` — reassembly from a topic;
:mod:`~dpsynth.release.files` — release files;
:mod:`~dpsynth.release.tabular_v1` — synthetic tables (``tabular.v1``).
"""

from __future__ import annotations

from typing import Any

from dpsynth.release.assembler import ReleaseAssembler
from dpsynth.release.files import read_release_file, read_release_records, write_release_file
from dpsynth.release.framing import (
    DEFAULT_MAX_CHUNK_BYTES,
    REASONS,
    ReleaseIncompleteError,
    ReleaseKey,
    release_key,
)
from dpsynth.release.model import PLACEMENTS, RELEASE_SCHEMA_VERSION, Release, place_points
from dpsynth.release.points_v1 import (
    FORMAT_VERSION,
    MAX_DECODE_DEPTH,
    decode_release,
    encode_release,
)
from dpsynth.release.tabular_v1 import (
    TabularRelease,
    decode_tabular_release,
    encode_tabular_release,
)

__all__ = [
    "DEFAULT_MAX_CHUNK_BYTES", "FORMAT_VERSION", "MAX_DECODE_DEPTH", "PLACEMENTS",
    "REASONS", "RELEASE_SCHEMA_VERSION", "Release",
    "ReleaseAssembler", "ReleaseIncompleteError", "ReleaseKey", "TabularRelease",
    "decode_release", "decode_tabular_release", "encode_release", "encode_tabular_release",
    "place_points", "read_release_file", "read_release_records", "release_key",
    "encode_any_release", "write_release_file",
]


def encode_any_release(release: Release | TabularRelease, *, run_id: str, partition: int,
                       max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES) -> tuple[int, list[Any]]:
    """``(sequence, records)`` of a release of either engine in its wire format."""
    if isinstance(release, TabularRelease):
        return release.sequence, encode_tabular_release(
            release, run_id=run_id, partition=partition, max_chunk_bytes=max_chunk_bytes)
    return release.sequence, encode_release(
        release, run_id=run_id, partition=partition, sequence=release.sequence,
        max_chunk_bytes=max_chunk_bytes)
