"""tabular.v1 wire format: round trip, determinism, every kind of damage detected."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.release import (
    ReleaseIncompleteError,
    TabularRelease,
    decode_release,
    decode_tabular_release,
    encode_tabular_release,
)


def _release(rows: int = 500, top: int = 90) -> TabularRelease:
    codes = (np.arange(rows * 3).reshape(rows, 3) * 7) % (top + 1)
    return TabularRelease(4, 5, codes, {"algorithm": "x", "epsilon": 1.0, "nested": {"b": 1}})


@pytest.mark.parametrize("top", [3, 300, 70000])
def test_round_trip_many_chunks(top):
    rel = _release(top=top)
    recs = encode_tabular_release(rel, run_id="run", partition=2, max_chunk_bytes=400)
    assert len(recs) > 4 and all(len(r) <= 400 for r in recs[1:-1])
    back = decode_tabular_release(recs)
    assert back == rel and back.records.dtype == np.int64
    assert encode_tabular_release(rel, run_id="run", partition=2, max_chunk_bytes=400) == recs


def test_empty_release():
    rel = TabularRelease(0, 1, np.zeros((0, 4), np.int64), {})
    assert decode_tabular_release(encode_tabular_release(rel, run_id="r", partition=0)) == rel


def test_damage_is_detected():
    recs = encode_tabular_release(_release(), run_id="r", partition=0, max_chunk_bytes=400)
    for broken in (recs[:-1], recs[1:], [recs[0], *recs[2:]], [recs[0], recs[2], recs[1],
                   *recs[3:]], [*recs, recs[-1]]):
        with pytest.raises(ReleaseIncompleteError):
            decode_tabular_release(broken)
    other = encode_tabular_release(_release(), run_id="other", partition=0, max_chunk_bytes=400)
    with pytest.raises(ReleaseIncompleteError, match="another release"):
        decode_tabular_release([recs[0], other[1], *recs[2:]])
    tampered = bytearray(recs[1])
    tampered[-1] ^= 1
    with pytest.raises(ReleaseIncompleteError, match="sha256"):
        decode_tabular_release([recs[0], bytes(tampered), *recs[2:]])


def test_point_and_tabular_readers_refuse_each_other():
    recs = encode_tabular_release(_release(), run_id="r", partition=0)
    with pytest.raises(ReleaseIncompleteError, match="format"):
        decode_release(recs)
