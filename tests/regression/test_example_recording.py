"""The bundled example recording is what the demo run makes today (issue 18).

The recording (``dpsynth/testing/data/demo-synthetic.ndjson.gz``, shipped with
``dpsynth[testing]``) is what downstream teams replay in their CI. It must follow the release
format and the demo run of this version: when either changes, this test fails until the file is
regenerated (``make example-recording``) and committed — so a stale example cannot ship.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from dpsynth.client.consumer import ReleaseTracker
from dpsynth.client.recording import RecordingReader
from dpsynth.keys import DEMO_KEY
from dpsynth.noise import KeyedNoise
from dpsynth.testing.recordings import example_recording
from tests.support.example_recording import POINTS, RELEASE_EVERY, build

pytestmark = pytest.mark.slow  # a demo run of 10^4 points (a few seconds)


def test_bundled_recording_is_regenerated_identically(tmp_path: Path) -> None:
    fresh = build(tmp_path / "fresh.ndjson.gz", tmp_path / "run")
    # compare the lines, not the gzip bytes (zlib builds may compress differently)
    assert gzip.decompress(fresh.read_bytes()) == gzip.decompress(
        example_recording().read_bytes()), (
        "the bundled example recording is stale (the release format or the demo run "
        "changed): regenerate it with `make example-recording` and commit it")


def test_bundled_recording_is_a_small_public_demo_release_stream() -> None:
    path = example_recording()
    assert 10_000 < path.stat().st_size < 100_000  # tens of KB
    with RecordingReader(path) as reader:
        header, records = reader.header, list(reader)
    assert header.role == "synthetic" and not header.sensitive
    assert header.release["epsilon"] == 1.0 and header.release["neighbours"] == "replace"
    assert header.release["key_fingerprint"] == KeyedNoise(DEMO_KEY).fingerprint()  # public
    assert header.run_id == f"run-{KeyedNoise(DEMO_KEY).fingerprint()}"
    tracker = ReleaseTracker(run_id=header.run_id)
    events = [e for r in records if (e := tracker.add(r.key, r.value, r.partition, r.offset))]
    assert [e.key.sequence for e in events] == list(range(1, POINTS // RELEASE_EVERY + 1))
    assert tracker.rejected == 0 and tracker.latest_t() == {0: POINTS}
    assert all(e.release.metadata["epsilon"] == 1.0 for e in events)
