"""Topic recordings without a broker: the line format, its JSON Schema, damage, content roles.

The broker side (export → import → export, the worker replaying an imported raw topic) is in
``tests/integration/test_topics.py`` and ``test_topics_worker.py``.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import msgpack
import numpy as np
import pytest

from dpsynth.client.content import MARKER_KEY, VALUES, classify, describe, release_summary
from dpsynth.client.recording import (
    SCHEMA_ID,
    RecordingError,
    RecordingHeader,
    RecordingReader,
    RecordingWriter,
    TopicRecord,
)
from dpsynth.keys import NoiseKey
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import encode_release
from dpsynth.stream.codecs import DeadLetterHasher, encode_dead_letter
from dpsynth.stream.ticks import MARKER_KEY as WORKER_MARKER_KEY
from dpsynth.stream.ticks import MarkerKey

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
HEADER = RecordingHeader(topic="events", partitions=3, role="raw", run_id="run-a",
                         values=VALUES["raw"], sensitive=True, note="ünïcode note")

#: Edge cases every reader must give back unchanged.
RECORDS = [
    TopicRecord(0, 0, None, None, 1_767_225_600_000, "CreateTime"),          # tombstone, no key
    TopicRecord(1, 0, b"", b"", 1_767_225_600_001, "LogAppendTime"),         # empty bytes
    TopicRecord(2, 7, b"\x00\xff", bytes(range(256)), -1, "NoTimestampType"),  # binary
    TopicRecord(0, 1, b"k", b"v", 1_767_225_599_000,                           # time going back
                "CreateTime", (("a", b"1"), ("a", None), ("é", b""))),       # repeated, null
]


def _write(records: list[TopicRecord], header: RecordingHeader = HEADER, *,
           compress: bool = True) -> bytes:
    out = io.BytesIO()
    if compress:
        with RecordingWriter(out, header) as writer:
            for r in records:
                writer.write(r)
        return out.getvalue()
    with RecordingWriter(out, header) as writer:  # a stream is always gzip: undo it
        for r in records:
            writer.write(r)
    return gzip.decompress(out.getvalue())


def test_records_and_header_round_trip_gzip_and_plain(tmp_path: Path) -> None:
    for data in (_write(RECORDS), _write(RECORDS, compress=False)):
        reader = RecordingReader(io.BytesIO(data))
        assert reader.header == HEADER
        assert list(reader) == RECORDS
        assert reader.end is not None and reader.end.records == 4
        assert reader.end.per_partition == {0: 2, 1: 1, 2: 1}
    path = tmp_path / "r.ndjson"  # a path ending in .ndjson is written uncompressed
    with RecordingWriter(path, HEADER) as writer:
        writer.write(RECORDS[0])
    assert path.read_bytes().startswith(b'{"kind": "header"')
    assert list(RecordingReader(path)) == RECORDS[:1]


def test_every_line_is_valid_against_the_json_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((SCHEMAS / "recording.v1.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert schema["$id"] == SCHEMA_ID
    lines = _write(RECORDS, compress=False).decode().splitlines()
    assert len(lines) == len(RECORDS) + 2
    for line in lines:
        validator.validate(json.loads(line))
    broken = json.loads(lines[1]) | {"timestamp_type": "Create"}
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)


def test_a_large_file_streams_in_batches_and_keeps_its_order() -> None:
    rng = np.random.default_rng(3)
    records = [TopicRecord(i % 5, i // 5, None, rng.bytes(int(rng.integers(0, 300))),
                           1_000 + i, "CreateTime") for i in range(20_000)]
    reader = RecordingReader(io.BytesIO(_write(records)))
    batches = list(reader.batches(max_bytes=64 * 1024))
    assert len(batches) > 10
    assert [r for b in batches for r in b] == records


@pytest.mark.parametrize(("cut", "message"), [
    (lambda lines: lines[:-1], "without its end line"),          # cut before the end line
    (lambda lines: lines[:2], "without its end line"),
    (lambda lines: lines[:1] + lines[2:], "end line counts 4 records, the file holds 3"),
    (lambda lines: [*lines, lines[1]], "line 6: a 'end' line among the records"),
    (lambda lines: lines[:2] + [b"{not json"] + lines[2:], "line 3 is not one JSON object"),
    (lambda lines: lines[:2] + [lines[0]] + lines[2:], "line 3: a 'header' line among"),
])
def test_damaged_recordings_fail_naming_the_line(cut, message) -> None:
    lines = _write(RECORDS, compress=False).splitlines(keepends=True)
    reader = RecordingReader(io.BytesIO(b"".join(cut(lines))))
    with pytest.raises(RecordingError, match=message):
        list(reader)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("partition", -1, "partition and offset must be integers"),
    ("offset", "3", "partition and offset must be integers"),
    ("timestamp", 1.5, "timestamp must be an integer"),
    ("timestamp_type", "create", "timestamp_type one of"),
    ("value", "not base64!", "value must be base64"),
    ("headers", [["h"]], "headers must be a list"),
    ("headers", [["h", "@@"]], "header 'h' must be base64"),
])
def test_bad_record_fields_are_refused_with_the_line_number(field, value, message) -> None:
    lines = _write(RECORDS, compress=False).splitlines(keepends=True)
    body = json.loads(lines[2]) | {field: value}
    lines[2] = json.dumps(body).encode() + b"\n"
    with pytest.raises(RecordingError, match=f"line 3.*{message}|{message}"):
        list(RecordingReader(io.BytesIO(b"".join(lines))))


def test_headers_of_other_formats_and_versions_are_refused() -> None:
    line = json.loads(HEADER.to_line())
    for change, message in (({"version": 2}, "version 2; this dpsynth reads version 1"),
                            ({"format": "other"}, "format 'other'"),
                            ({"kind": "end"}, "not a recording header"),
                            ({"partitions": 0}, "partitions .* must be an integer >= 1"),
                            ({"role": "secret"}, "role .* must be one of"),
                            ({"colour": "red"}, "unexpected keyword")):
        data = json.dumps(line | change).encode() + b"\n"
        with pytest.raises(RecordingError, match=message):
            RecordingReader(io.BytesIO(data))
    with pytest.raises(RecordingError, match="not a recording header"):
        RecordingReader(io.BytesIO(b"PK\x03\x04 a zip file"))


def test_a_path_appears_only_when_the_writer_finished(tmp_path: Path) -> None:
    path = tmp_path / "r.ndjson.gz"
    with pytest.raises(RuntimeError), RecordingWriter(path, HEADER) as writer:
        writer.write(RECORDS[0])
        raise RuntimeError("export interrupted")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RecordingError, match="cannot open the recording"):
        RecordingReader(path)


# -- what a topic holds ------------------------------------------------------------------------


def _release_records() -> list[bytes]:
    synth = OnlineSynthesizer(d=2, epsilon=2.0, key=bytes(32), release_every=50)
    release = synth.extend(np.random.default_rng(0).random((50, 2)))[0]
    return encode_release(release, run_id="run-s", partition=0, sequence=1)


def test_content_roles_run_ids_and_release_parameters() -> None:
    releases = _release_records()
    synthetic = describe(releases)
    assert synthetic.role == "synthetic" and synthetic.run_id == "run-s"
    assert synthetic.release == release_summary(msgpack.unpackb(releases[0]))
    assert synthetic.release["epsilon"] == 2.0 and synthetic.release["neighbours"] == "replace"
    assert set(synthetic.release) <= {"format", "d", "epsilon", "neighbours", "mechanism",
                                      "method", "key_fingerprint"}  # public fields only
    marker = MarkerKey(bytes(32), "run-w").encode(0, 60_000)
    raw = [msgpack.packb({"x": 1.0}), msgpack.packb([{"x": 1.0}]), marker, b"\xc1garbage"]
    assert describe(raw) == ("raw", "run-w", None)
    dead = encode_dead_letter(value=b"\xc1", topic="t", partition=0, offset=3, timestamp_ms=0,
                              rejects=[(-1, "not msgpack")], n_records=0,
                              hasher=DeadLetterHasher(NoiseKey(bytes(32))))
    assert describe([dead, dead]).role == "dead-letter"
    # a topic keeps the letters written before an upgrade: format 2 (unsalted sha256) and 1
    old = {"topic": "t", "partition": 0, "offset": 3, "reason": "r"}
    for letter in ({"format": 2, **old, "length": 1, "sha256": "00" * 32},
                   {"format": 1, **old, "raw": b"\xc1"}):
        assert classify(msgpack.packb(letter)) == ("dead-letter", None)
    assert classify(msgpack.packb({"format": 3, **old, "length": 1})) == ("raw", None)
    assert describe([b"plain text", None]).role == "other"
    assert describe(releases, role="raw", run_id="given") == ("raw", "given", None)
    assert classify(None) == ("other", None)


def test_marker_key_is_the_workers() -> None:
    assert MARKER_KEY == WORKER_MARKER_KEY


def test_lines_of_another_writer_read_the_same_as_ours() -> None:
    """Any JSON layout of the schema reads alike: other key orders, spaces, escapes (the
    reader's fast path covers only its own writer's layout; the rest goes through JSON)."""
    ours = _write(RECORDS, compress=False).splitlines(keepends=True)
    theirs = [ours[0]]
    for line in ours[1:-1]:
        body = json.loads(line)
        reordered = dict(reversed(list(body.items())))
        theirs.append(json.dumps(reordered, indent=None, separators=(", ", ": "))
                      .replace("/", "\\/").encode() + b"\n")
    theirs.append(ours[-1])
    assert list(RecordingReader(io.BytesIO(b"".join(theirs)))) == RECORDS
    fast = _write([r._replace(headers=()) for r in RECORDS], compress=False)
    assert list(RecordingReader(io.BytesIO(fast))) == [r._replace(headers=()) for r in RECORDS]
