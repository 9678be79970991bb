"""Release files: a release's records, each prefixed by its length, written atomically.

Layer: core (local files only).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from dpsynth.errors import ConfigError
from dpsynth.release.framing import ReleaseIncompleteError
from dpsynth.release.model import Release
from dpsynth.release.points_v1 import MAX_DECODE_DEPTH, decode_release


def write_release_file(path: str | os.PathLike[str], records: Iterable[bytes]) -> None:
    """Write records to one file, each prefixed by its length (4 bytes, big-endian).

    The file is written to a temporary name and renamed, so readers never see half a release.
    """
    parts = []
    for position, record in enumerate(records):
        if not isinstance(record, bytes | bytearray):
            raise ConfigError(f"record {position} ({type(record).__name__}) must be bytes")
        if len(record) >= 1 << 32:
            raise ConfigError(f"record {position} ({len(record)} bytes) must be below 4 GiB")
        parts += [len(record).to_bytes(4, "big"), bytes(record)]
    target = os.fspath(path)
    tmp = f"{target}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(b"".join(parts))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


def read_release_records(path: str | os.PathLike[str]) -> list[bytes]:
    """The length-prefixed records of a release file, without decoding them."""
    with open(path, "rb") as f:
        data = f.read()
    records: list[bytes] = []
    offset = 0
    while offset < len(data):
        if offset + 4 > len(data):
            raise ReleaseIncompleteError(
                f"release file {os.fspath(path)!r} ends inside a length prefix: truncated",
                "truncated",
            )
        size = int.from_bytes(data[offset : offset + 4], "big")
        if offset + 4 + size > len(data):
            raise ReleaseIncompleteError(
                f"release file {os.fspath(path)!r}: record {len(records)} ({size} bytes) "
                "runs past the end of the file: truncated", "truncated"
            )
        records.append(data[offset + 4 : offset + 4 + size])
        offset += 4 + size
    return records


def read_release_file(
    path: str | os.PathLike[str], *, max_depth: int = MAX_DECODE_DEPTH
) -> Release:
    """Read and decode the one release of a file written by :func:`write_release_file`."""
    return decode_release(read_release_records(path), max_depth=max_depth)


