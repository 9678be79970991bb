"""Materialised points (dpsynth.points v1): Arrow IPC chunks that a reader without dpsynth
decodes into exactly Release.points in the schema's units; dpsynth run's points files; the
worker's points records beside each release (a broker-free processor)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jsonschema
import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pytest
from click.testing import CliRunner

from dpsynth.cli import main
from dpsynth.errors import ConfigError
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import read_release_file
from dpsynth.release.model import Release
from dpsynth.release.points_arrow import check_points_output, encode_points
from dpsynth.schema import Schema

ROOT = Path(__file__).resolve().parents[2]
KEY = bytes(range(32))
LATLON = Schema.from_json_file(ROOT / "schemas" / "example-schema.json")


def _reader():
    """examples/points/read_points.py: the reading code of a team without dpsynth."""
    spec = importlib.util.spec_from_file_location(
        "read_points", ROOT / "examples" / "points" / "read_points.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _releases(d: int, n: int, release_every: int, **kw) -> list[Release]:
    synth = OnlineSynthesizer(d=d, epsilon=1.0, key=KEY, release_every=release_every, **kw)
    return synth.extend(np.random.default_rng(d).random((n, d)) ** 2)


def _schema(d: int) -> Schema:
    return Schema.from_dict({"version": 1, "columns": [
        {"name": f"col {i} (µ)", "lower": -10.0 * (i + 1), "upper": 3.5 + i} for i in range(d)]})


def test_the_reader_imports_nothing_of_dpsynth():
    source = (ROOT / "examples" / "points" / "read_points.py").read_text()
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))
               or line.strip().startswith(("import ", "from confluent"))]
    assert imports and not any("dpsynth" in line for line in imports), imports


@pytest.mark.parametrize(("d", "n", "max_bytes"), [(1, 3000, 2048), (2, 6000, 4096),
                                                   (3, 4000, 256_000)])
def test_chunks_decode_to_the_release_points_in_units(d, n, max_bytes):
    schema = LATLON if d == 2 else _schema(d)
    reader = _reader()
    for release in _releases(d, n, 1000):
        records = encode_points(release, schema, run_id="run-p", partition=3,
                                max_chunk_bytes=max_bytes)
        assert all(len(r) <= max_bytes for r in records)
        assembler = reader.PointsAssembler()
        done = [assembler.add(r) for r in records[::-1] + records]  # any order, duplicated
        completed = [x for x in done if x is not None]
        assert len(completed) == 1
        description, rows = completed[0]
        assert rows.column_names == list(schema.names)
        got = np.column_stack([rows.column(i).to_numpy() for i in range(d)])
        expected = schema.from_unit(release.points)
        assert got.dtype == np.float64 and np.array_equal(got, expected)  # bit for bit
        assert description["sequence"] == release.sequence and description["t"] == release.t
        assert description["release"] == json.loads(json.dumps(release.metadata))
        assert description["columns"] == [{"name": c.name, "lower": c.lower, "upper": c.upper}
                                          for c in schema.columns]


def test_chunk_descriptions_tile_the_rows_and_bytes_are_deterministic():
    release = _releases(2, 20_000, 20_000)[0]
    records = encode_points(release, LATLON, run_id="r", partition=0, max_chunk_bytes=50_000)
    assert records == encode_points(release, LATLON, run_id="r", partition=0,
                                    max_chunk_bytes=50_000)
    descriptions = [json.loads(pa.ipc.open_stream(r).schema.metadata[b"dpsynth"])
                    for r in records]
    assert [x["chunk"] for x in descriptions] == list(range(len(records))) and len(records) > 5
    assert {x["n_chunks"] for x in descriptions} == {len(records)}
    firsts = [x["first_row"] for x in descriptions]
    assert firsts == list(np.cumsum([0] + [x["rows"] for x in descriptions[:-1]]))
    assert sum(x["rows"] for x in descriptions) == release.t
    validator = jsonschema.Draft202012Validator(
        json.loads((ROOT / "schemas" / "points.v1.json").read_text()))
    for description in descriptions:
        validator.validate(description)
    # near the limit: the rows fill the record (not a loose bound)
    assert min(len(r) for r in records[:-1]) > 50_000 - 128


def test_an_empty_release_is_one_chunk_of_no_rows():
    release = Release(t=0, depth=2, leaf_counts=np.zeros(4, np.int64),
                      metadata={"d": 2, "sequence": 1})
    (record,) = encode_points(release, LATLON, run_id="r", partition=0)
    table = pa.ipc.open_stream(record).read_all()
    assert table.num_rows == 0 and table.column_names == ["lat", "lon"]


def test_a_limit_too_small_or_a_wrong_schema_is_refused():
    release = _releases(2, 1000, 1000)[0]
    with pytest.raises(ConfigError, match="release_max_record_bytes"):
        check_points_output(LATLON, 1024, release.metadata)
    check_points_output(LATLON, 2048, release.metadata)
    with pytest.raises(ConfigError, match="do not match the release's d"):
        encode_points(release, _schema(3), run_id="r", partition=0)


def test_dpsynth_run_writes_points_files_equal_to_its_releases(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [
        "run", "--out", str(out), "--points", "3000", "--release-every", "1000",
        "--points-format", "arrow", "--no-report"])
    assert result.exit_code == 0, result.output
    schema = Schema.from_json_file(out / "schema.json")
    assert schema.names == ("x", "y")
    files = sorted((out / "points").glob("points-*.arrow"))
    assert [f.name for f in files] == [f"points-{s:06d}.arrow" for s in (1, 2, 3)]
    for path in files:
        table = pa.ipc.open_file(path).read_all()  # an Arrow IPC file (Feather v2)
        release = read_release_file(out / "releases" / path.name.replace(
            "points", "release").replace(".arrow", ".bin"))
        got = np.column_stack([table.column(n).to_numpy() for n in schema.names])
        assert np.array_equal(got, schema.from_unit(release.points))
        description = json.loads(table.schema.metadata[b"dpsynth"])
        assert (description["n_chunks"], description["rows"]) == (1, release.t)
    again = CliRunner().invoke(main, ["run", "--out", str(out), "--points", "1000",
                                      "--release-every", "1000", "--no-report"])
    assert again.exit_code == 0, again.output
    assert not list((out / "points").glob("*.arrow"))  # an earlier run's points are removed


def test_the_worker_publishes_points_after_each_release(tmp_path):
    pytest.importorskip("rocksdict")
    from dpsynth.stream.processor import InputMessage, PartitionProcessor
    from dpsynth.stream.store import PartitionStore
    from dpsynth.testing.kafka import encode_records, records_of
    from tests.support.embedded import MemorySink
    from tests.support.processor import point_config

    points = np.random.default_rng(5).random((1200, 2))
    messages = [InputMessage(offset=k, value=encode_records(records_of(points[i:i + 100])))
                for k, i in enumerate(range(0, 1200, 100))]
    sent = {}
    for setting in ("none", "arrow"):
        (tmp_path / setting).mkdir()
        config = point_config(tmp_path / setting, DPSYNTH_RELEASE_EVERY="500",
                              DPSYNTH_POINTS_FORMAT=setting,
                              DPSYNTH_RELEASE_MAX_RECORD_BYTES="4096")
        store = PartitionStore(config.data_dir / "p0", partition=0, run_id=config.run_id,
                               chunk_bytes=16384, sync=False)
        sink = MemorySink()
        processor = PartitionProcessor(config, 0, store=store, sink=sink)
        processor.process(messages)
        processor.commit()
        processor.close()
        sent[setting] = sink.sent
    topics = [topic for topic, *_ in sent["arrow"]]
    releases = [(t, k, v) for t, k, v, _ in sent["arrow"] if t == config.output_topic]
    assert releases == [(t, k, v) for t, k, v, _ in sent["none"]  # the releases: unchanged
                        if t == config.output_topic]
    assert config.points_topic not in [t for t, *_ in sent["none"]]
    reader = _reader().PointsAssembler()
    by_key = {}
    for topic, key, value, _ in sent["arrow"]:
        if topic == config.points_topic:
            done = reader.add(value)
            if done is not None:
                by_key[key] = done
    assert sorted(by_key) == [b"test-run/0/1", b"test-run/0/2"]
    # each release's points follow its records, before the next release's (the latest view
    # comes after them in the release transaction)
    first_points = topics.index(config.points_topic)
    assert topics[:first_points] == [config.output_topic] * first_points


@pytest.mark.parametrize(("env", "message"), [
    ({"DPSYNTH_POINTS_TOPIC": "dpsynth-synthetic"}, "must differ"),
    ({"DPSYNTH_RELEASE_MAX_RECORD_BYTES": "1024"}, "DPSYNTH_RELEASE_MAX_RECORD_BYTES"),
])
def test_the_worker_refuses_a_points_setting_it_cannot_honour(tmp_path, env, message):
    from tests.support.processor import point_config

    with pytest.raises(ConfigError, match=message):
        point_config(tmp_path, DPSYNTH_POINTS_FORMAT="arrow", DPSYNTH_OUTPUT_TOPIC=(
            "dpsynth-synthetic"), **env)


def test_topics_create_sizes_the_points_topic_like_the_synthetic_one(monkeypatch):
    from dpsynth.cli.topics_create import _points_topic, topic_specs

    specs = topic_specs(input_topic="i", output_topic="o", dead_letter_topic="d", partitions=4,
                        output_partitions=2, replication=3, input_retention_ms=-1,
                        output_retention_ms=7, dead_letter_retention_ms=1,
                        input_max_message_bytes=1048588, release_max_record_bytes=900_000,
                        points_topic="o-points")
    synthetic, points = specs[1], specs[3]
    assert (points.name, points.partitions, points.config) == (
        "o-points", synthetic.partitions, synthetic.config)
    monkeypatch.delenv("DPSYNTH_POINTS_FORMAT", raising=False)
    assert _points_topic() is None
    monkeypatch.setenv("DPSYNTH_POINTS_FORMAT", "arrow")
    assert _points_topic() == "dpsynth-synthetic-points"
