"""The release envelope's one-copy packing equals msgpack's own encoding, byte for byte."""

from __future__ import annotations

import hashlib

import msgpack
import numpy as np
import pytest

from dpsynth.release import Release, encode_release
from dpsynth.release.framing import pack, pack_with_arrays

HEAD = {"kind": "chunk", "run_id": "r", "partition": 3, "sequence": 2**40, "index": 7}


@pytest.mark.parametrize("n", [0, 1, 31, 32, 63, 64, 8191, 8192, 16383, 16384, 40_000])
@pytest.mark.parametrize("cell_dtype", ["<u4", "<u8"])
def test_pack_with_arrays_equals_msgpack_across_bin_sizes(n: int, cell_dtype: str) -> None:
    """Sizes cross msgpack's bin 8 / bin 16 / bin 32 boundaries (256 and 65,536 bytes)."""
    rng = np.random.default_rng(n)
    cells = np.sort(rng.integers(0, 2**31, n)).astype(cell_dtype)
    counts = rng.integers(1, 2**40, n).astype("<i8")
    expected = msgpack.packb({**HEAD, "cells": cells.tobytes(), "counts": counts.tobytes()},
                             use_bin_type=True)
    assert pack_with_arrays(HEAD, {"cells": cells, "counts": counts}) == expected


def test_pack_with_arrays_takes_slices_and_refuses_strided_arrays() -> None:
    values = np.arange(1000, dtype="<i8")
    assert pack_with_arrays(HEAD, {"v": values[100:900]}) == pack(
        {**HEAD, "v": values[100:900].tobytes()})
    with pytest.raises(ValueError, match="contiguous"):
        pack_with_arrays(HEAD, {"v": values[::2]})


def test_encoded_records_are_canonical_msgpack_and_the_checksum_covers_them() -> None:
    """A large release (several 256 kB chunks, bin 32 payloads): every record is msgpack's own
    encoding of its map, and the end's sha256 is that of header and chunks joined."""
    rng = np.random.default_rng(5)
    counts = np.zeros(1 << 20, np.int64)
    cells = rng.choice(1 << 20, 60_000, replace=False)
    counts[cells] = rng.integers(1, 50, cells.size)
    release = Release(t=int(counts.sum()), depth=20, leaf_counts=counts, metadata={"d": 2})
    records = encode_release(release, run_id="big", partition=1, sequence=9)
    assert len(records) > 4  # header, several chunks, end
    for record in records:
        assert msgpack.packb(msgpack.unpackb(record), use_bin_type=True) == record
    end = msgpack.unpackb(records[-1])
    assert end["sha256"] == hashlib.sha256(b"".join(records[:-1])).hexdigest()
