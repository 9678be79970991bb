"""Releases: the in-memory model and the wire formats consumers read.

Layer: core (msgpack only). :mod:`~dpsynth.release.model` — :class:`Release` (consistent leaf
counts and a public placement seed) and placement; :mod:`~dpsynth.release.points_v1` — release
format v1 (header, bounded chunks, checksummed end) and its assembler;
:mod:`~dpsynth.release.tabular_v1` — synthetic tables (``tabular.v1``).
"""

from __future__ import annotations

from dpsynth.release.model import PLACEMENTS, RELEASE_SCHEMA_VERSION, Release, place_points
from dpsynth.release.points_v1 import (
    DEFAULT_MAX_CHUNK_BYTES,
    ReleaseAssembler,
    ReleaseIncompleteError,
    ReleaseKey,
    decode_release,
    encode_release,
    read_release_file,
    read_release_records,
    release_key,
    write_release_file,
)
from dpsynth.release.tabular_v1 import (
    TabularRelease,
    decode_tabular_release,
    encode_tabular_release,
)

__all__ = [
    "DEFAULT_MAX_CHUNK_BYTES", "PLACEMENTS", "RELEASE_SCHEMA_VERSION", "Release",
    "ReleaseAssembler", "ReleaseIncompleteError", "ReleaseKey", "TabularRelease",
    "decode_release", "decode_tabular_release", "encode_release", "encode_tabular_release",
    "place_points", "read_release_file", "read_release_records", "release_key",
    "write_release_file",
]
