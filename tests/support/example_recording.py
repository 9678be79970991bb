"""The bundled example recording of a synthetic topic, made by the demo run (issue 18).

Regenerate it whenever the release format or the demo run changes (a test in
``tests/regression/test_example_recording.py`` fails until then)::

    make example-recording        # = python -m tests.support.example_recording

What it is: ``dpsynth run --points 10000 --release-every 2000`` — the demo run's generated
stream (drifting Gaussian blobs, seed 0), the default mechanism, ε = 1, the public demo key
``bytes(32)`` — and its five releases written as the worker would publish them to the synthetic
topic: each release's records under the key ``run_id/partition/sequence`` on partition 0, at
consecutive offsets. A recorded topic has timestamps; an embedded run has none, so release k is
stamped 2026-01-01T00:00:00Z + k minutes (public, fixed: the file never depends on the clock).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import msgpack
from click.testing import CliRunner

from dpsynth.cli.run import run
from dpsynth.client.content import VALUES, release_summary
from dpsynth.client.recording import RecordingHeader, RecordingWriter, TopicRecord
from dpsynth.release import read_release_records
from dpsynth.stream.codecs import release_record_key
from dpsynth.testing.recordings import example_recording

POINTS, RELEASE_EVERY = 10_000, 2_000
RUN_ARGS = ["--points", str(POINTS), "--release-every", str(RELEASE_EVERY), "--w1-points", "100"]
ORIGIN_MS, PERIOD_MS = 1_767_225_600_000, 60_000  # 2026-01-01T00:00:00Z, one release a minute
#: The generated stream's columns: x, y in [0, 1] (its points are the records).
RECORD_SCHEMA = {"version": 1, "columns": [{"name": "x", "lower": 0.0, "upper": 1.0},
                                           {"name": "y", "lower": 0.0, "upper": 1.0}]}


def demo_release_files(workdir: Path) -> list[Path]:
    """Run the demo (public demo key: the key variables are unset) into ``workdir``."""
    result = CliRunner().invoke(
        run, [*RUN_ARGS, "--out", str(workdir)], catch_exceptions=False,
        env={"DPSYNTH_NOISE_KEY": None, "DPSYNTH_NOISE_KEY_FILE": None})
    if result.exit_code != 0:
        raise RuntimeError(f"dpsynth run failed:\n{result.output}")
    return sorted((workdir / "releases").glob("release-*.bin"))


def build(target: Path, workdir: Path) -> Path:
    """Write the example recording to ``target`` from a fresh demo run in ``workdir``."""
    files = demo_release_files(workdir)
    releases = [read_release_records(path) for path in files]
    first = msgpack.unpackb(releases[0][0], raw=False)
    header = RecordingHeader(
        topic="dpsynth-synthetic", partitions=1, role="synthetic", run_id=first["run_id"],
        values=VALUES["synthetic"], release=release_summary(first),
        record_schema=RECORD_SCHEMA, sensitive=False,
        note=(f"example: dpsynth run {' '.join(RUN_ARGS[:4])} (the demo run's generated "
              "stream) with the public demo key bytes(32) — public noise, not a private "
              "release; release k stamped 2026-01-01T00:00:00Z + k min"))
    offset = 0
    with RecordingWriter(target, header, compresslevel=9) as writer:
        for records in releases:
            head = msgpack.unpackb(records[0], raw=False)
            key = release_record_key(head["run_id"], head["partition"], head["sequence"])
            stamp = ORIGIN_MS + head["sequence"] * PERIOD_MS
            for value in records:
                writer.write(TopicRecord(0, offset, key, value, stamp, "CreateTime"))
                offset += 1
    return target


def main() -> None:
    """Rewrite the bundled recording (the package data of dpsynth.testing)."""
    target = example_recording()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as workdir:
        build(target, Path(workdir))
    print(f"wrote {target} ({target.stat().st_size:,} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
