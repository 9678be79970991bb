"""The pytest plugin's recorded-topic fixtures, as a downstream team uses them (real broker).

- ``dpsynth_recorded_topic`` (default: the bundled example) holds exactly the recording's
  records — exported back, the same partitions, keys, values, headers and timestamps;
- ``dpsynth_synthetic_dataset`` equals the merge of the recording's latest releases decoded
  offline (no broker), in the recording's units;
- in a fresh pytest session: ``--dpsynth-recording`` replays another recording (two input
  partitions, a duplicated release): the dataset is the union of both partitions' latest
  releases, each once; ``DPSYNTH_KAFKA_REQUIRED`` turns a missing broker into a failure.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from dpsynth.client.consumer import ReleaseTracker
from dpsynth.client.recording import RecordingHeader, RecordingReader, RecordingWriter, TopicRecord
from dpsynth.client.transfer import export_topic
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import encode_release
from dpsynth.schema import Schema
from dpsynth.stream.codecs import release_record_key
from dpsynth.testing.recordings import example_recording

pytestmark = pytest.mark.kafka
pytest_plugins = ("pytester",)  # the last test runs pytest sessions of its own


def test_recorded_topic_holds_the_recording(dpsynth_recorded_topic, dpsynth_recording,
                                            tmp_path: Path) -> None:
    assert dpsynth_recording == example_recording()
    topic = dpsynth_recorded_topic
    out = tmp_path / "back.ndjson.gz"
    export_topic(topic.bootstrap, topic.topic, out)
    with RecordingReader(dpsynth_recording) as original, RecordingReader(out) as back:
        assert back.header.role == "synthetic" and not back.header.sensitive
        assert back.header.run_id == original.header.run_id == topic.header.run_id
        assert back.header.release == original.header.release
        assert list(back) == list(original)  # offsets too: a fresh topic, written in order
    assert topic.records == 15


def test_synthetic_dataset_is_the_merge_of_the_latest_releases(dpsynth_synthetic_dataset,
                                                               dpsynth_recording) -> None:
    with RecordingReader(dpsynth_recording) as reader:
        header, tracker = reader.header, ReleaseTracker()
        for r in reader:
            tracker.add(r.key, r.value, r.partition, r.offset)
    schema = Schema.from_dict(dict(header.record_schema))
    data = dpsynth_synthetic_dataset
    np.testing.assert_array_equal(data.points, tracker.merge_latest(schema=schema))
    assert data.points.shape == (10_000, 2) and len(data) == 10_000
    assert data.columns == ("x", "y") and data.epsilon == 1.0
    assert data.run_id == header.run_id and data.releases == {0: (5, 10_000)}
    assert data.records()[0].keys() == {"x", "y"}
    assert ((data.points >= 0) & (data.points <= 1)).all()


def _two_partition_recording(path: Path) -> np.ndarray:
    """A synthetic topic of two input partitions (release 2 of partition 1 sent twice);
    returns the points of the merged dataset in the schema's units."""
    schema = Schema.from_dict({"version": 1, "columns": [
        {"name": "lat", "lower": 40.0, "upper": 41.0},
        {"name": "lon", "lower": -75.0, "upper": -73.0}]})
    header = RecordingHeader(topic="synthetic", partitions=2, role="synthetic", run_id="two",
                             record_schema=schema.to_dict())
    latest, offsets = [], [0, 0]
    with RecordingWriter(path, header) as writer:
        for p in (0, 1):
            synth = OnlineSynthesizer(d=2, epsilon=1.0, key=bytes(range(32)),
                                      release_every=400, partition=p)
            releases = synth.extend(np.random.default_rng(p).random((1200 + 400 * p, 2)))
            latest.append(releases[-1])
            copies = [*releases, releases[1]] if p == 1 else releases
            for r in copies:
                seq = int(r.metadata["sequence"])
                for value in encode_release(r, run_id="two", partition=p, sequence=seq,
                                            max_chunk_bytes=2000):
                    writer.write(TopicRecord(p, offsets[p], release_record_key("two", p, seq),
                                             value, 1_767_225_600_000 + seq, "CreateTime"))
                    offsets[p] += 1
    return schema.from_unit(np.vstack([r.points for r in latest]))


def test_a_session_replays_the_recording_it_is_given(pytester, kafka_bootstrap: str,
                                                     monkeypatch, tmp_path: Path) -> None:
    recording = tmp_path / "two.ndjson.gz"
    expected = _two_partition_recording(recording)
    np.save(tmp_path / "expected.npy", expected)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)  # the outer session's
    pytester.makepyfile(test_downstream=textwrap.dedent(f"""
        import numpy as np

        def test_dataset(dpsynth_synthetic_dataset, dpsynth_recorded_topic):
            data = dpsynth_synthetic_dataset
            assert data.columns == ("lat", "lon")
            assert data.releases == {{0: (3, 1200), 1: (4, 1600)}}
            assert dpsynth_recorded_topic.header.run_id == "two"
            np.testing.assert_array_equal(data.points, np.load({str(tmp_path / 'expected.npy')!r}))
    """))
    result = pytester.runpytest("-p", "no:cacheprovider", f"--dpsynth-recording={recording}")
    result.assert_outcomes(passed=1)

    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS")
    monkeypatch.setenv("DPSYNTH_KAFKA_REQUIRED", "1")
    monkeypatch.setenv("PATH", "")  # no java, no bash: no local broker
    monkeypatch.setenv("DPSYNTH_KAFKA_NO_DOCKER", "1")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    failed = pytester.runpytest("-p", "no:cacheprovider", f"--dpsynth-recording={recording}")
    failed.assert_outcomes(errors=1)
    failed.stdout.fnmatch_lines(["*no Kafka broker*DPSYNTH_KAFKA_REQUIRED is set*"])
