"""The consumer library's broker-free core: no duplicate, no corrupt release, latest per partition,
and the merge of the partitions' latest releases."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.client.consumer import ReleaseTracker
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import encode_release
from dpsynth.schema import Column, Schema

KEY = bytes(range(32))


def _releases(partition, n=900, every=300):
    points = np.random.default_rng(partition).random((n, 2))
    synth = OnlineSynthesizer(2, 1.0, KEY, every, max_depth=8, partition=partition,
                              mechanism="paper")  # 450-byte chunks fit
    return [(r.metadata["sequence"], r) for r in synth.extend(points)]


def _records(run_id, partition, sequence, release):
    key = f"{run_id}/{partition}/{sequence}".encode()
    return [(key, r) for r in encode_release(release, run_id=run_id, partition=partition,
                                             sequence=sequence, max_chunk_bytes=450)]


def test_duplicates_partial_releases_and_corruption_never_come_out():
    tracker = ReleaseTracker(run_id="run")
    (s1, r1), (s2, r2), (s3, r3) = _releases(0)
    rec1, rec2, rec3 = (_records("run", 0, s, r) for s, r in ((s1, r1), (s2, r2), (s3, r3)))
    assert len(rec2) > 3
    stream = [
        *rec1,
        *rec2[: len(rec2) // 2],          # a release cut by a crash (mid-release) ...
        *rec2,                            # ... then its byte-identical retry
        *rec1,                            # a duplicate of a whole release
        rec3[1],                          # a chunk without its header: rejected
        *rec3[:-1],
        (rec3[-1][0], rec3[-1][1][:-3] + b"zzz"),  # a corrupt end record: rejected
        *rec3,                            # the complete retry is still accepted
    ]
    out = [tracker.add(k, v) for k, v in stream]
    events = [e for e in out if e is not None]
    assert [e.key.sequence for e in events] == [s1, s2, s3]
    assert events[1].release == r2 and events[2].release == r3
    assert tracker.rejected == 2
    assert tracker.latest_t() == {0: r3.t}


def test_latest_is_the_highest_sequence_even_out_of_order():
    tracker = ReleaseTracker()
    (s1, r1), (s2, r2), _ = _releases(1)
    for k, v in _records("run", 1, s2, r2) + _records("run", 1, s1, r1):
        tracker.add(k, v)
    assert tracker.latest[("run", 1)][0].sequence == s2


def test_merge_latest_is_the_union_of_the_partitions_latest_points():
    tracker = ReleaseTracker()
    latest = {}
    for p in (0, 1):
        for s, r in _releases(p):
            for k, v in _records("run", p, s, r):
                tracker.add(k, v)
            latest[p] = r
    merged = tracker.merge_latest()
    assert merged.shape == (1800, 2)
    np.testing.assert_array_equal(merged, np.vstack([latest[0].points, latest[1].points]))
    schema = Schema((Column("a", 0, 10), Column("b", -1, 1)))
    scaled = tracker.merge_latest(schema=schema)
    np.testing.assert_allclose(scaled[:, 0], merged[:, 0] * 10)


def test_other_runs_are_ignored_or_must_be_named():
    tracker = ReleaseTracker()
    (s, r), *_ = _releases(0)
    for run in ("a", "b"):
        for k, v in _records(run, 0, s, r):
            tracker.add(k, v)
    with pytest.raises(ValueError, match="several runs"):
        tracker.merge_latest()
    assert tracker.merge_latest(run_id="a").shape == (r.t, 2)
    only_a = ReleaseTracker(run_id="a")
    events = [only_a.add(k, v) for run in ("a", "b") for k, v in _records(run, 0, s, r)]
    assert sum(e is not None for e in events) == 1
