"""``dpsynth topics export`` / ``import`` against a real broker (fixture ``kafka_bootstrap``).

- export → import → export: the two recordings hold the same records in the same order —
  partition, key, value, headers and CreateTime timestamps (offsets may differ) — and both
  equal what a plain producer wrote; the import creates the missing topic with the recorded
  partition count;
- a topic with too few partitions is refused, naming the fix;
- ``--timestamps now|shift`` re-stamps, ``--pace`` takes the recorded time;
- a LogAppendTime topic is recorded as such and imported as CreateTime with the same times;
- ``export --out -`` piped into ``import -`` (a recording streams).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dpsynth.cli.topics import topics
from dpsynth.client.recording import (
    RecordingHeader,
    RecordingReader,
    RecordingWriter,
    TopicRecord,
)
from dpsynth.client.transfer import PaceClock, import_recording
from dpsynth.testing.kafka import create_topics, read_topic

ck = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.kafka


def _name(kind: str) -> str:
    return f"dpsynth-it-topics-{kind}-{uuid.uuid4().hex[:8]}"


def _cli(*args: str, ok: bool = True) -> Any:
    result = CliRunner().invoke(topics, list(args), catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def _produced(now_ms: int) -> list[TopicRecord]:
    """What a plain producer writes: 3 partitions, every kind of key, value and header, and
    timestamps that go back within a partition."""
    out = []
    for i in range(600):
        p = i % 3
        key = None if i % 7 == 0 else b"" if i % 11 == 0 else f"key-{i}".encode()
        value = None if i % 13 == 0 else bytes([i % 256]) * (i % 50)
        headers = () if i % 2 else (("trace", f"{i}".encode()), ("trace", None), ("ø", b""))
        stamp = now_ms - 60_000 + 10 * i - (500 if i % 17 == 0 else 0)
        out.append(TopicRecord(p, -1, key, value, stamp, "CreateTime", headers))
    return out


def _produce(bootstrap: str, topic: str, records: list[TopicRecord]) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for r in records:
        producer.produce(topic, r.value, r.key, r.partition, timestamp=r.timestamp,
                         headers=list(r.headers) or None)
    assert producer.flush(60) == 0


def _lines(path: Path) -> tuple[Any, list[TopicRecord]]:
    with RecordingReader(path) as reader:
        return reader.header, [r._replace(offset=-1) for r in reader]


def test_export_import_export_keeps_partitions_order_keys_values_headers_and_times(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    source, copy = _name("source"), _name("copy")
    create_topics(kafka_bootstrap, {source: 3})
    produced = _produced(int(time.time() * 1000))
    _produce(kafka_bootstrap, source, produced)
    first, second = tmp_path / "first.ndjson.gz", tmp_path / "second.ndjson.gz"
    _cli("export", "--bootstrap", kafka_bootstrap, "--topic", source, "--out", str(first))
    result = _cli("import", str(first), "--bootstrap", kafka_bootstrap, "--topic", copy)
    assert f"imported 600 records (3 partitions with records) into {copy} (3 partitions" \
        in result.output
    _cli("export", "--bootstrap", kafka_bootstrap, "--topic", copy, "--out", str(second))

    header_1, records_1 = _lines(first)
    header_2, records_2 = _lines(second)
    assert records_1 == records_2  # partition, order, key, value, headers, CreateTime
    assert (header_1.topic, header_2.topic) == (source, copy)
    assert header_1.partitions == header_2.partitions == 3
    assert header_1.role == "other" and header_1.sensitive  # not a release: protect it
    for p in range(3):  # each partition exactly as produced, in order
        assert [r for r in records_1 if r.partition == p] == [
            r for r in produced if r.partition == p]
    stamps = [r.timestamp for r in records_1]  # partitions merged by time
    assert stamps != sorted(stamps)  # (only where a partition itself goes back)
    with RecordingReader(first) as reader:
        offsets = [r.offset for r in reader if r.partition == 0]
    assert offsets == list(range(200))


def test_a_topic_with_too_few_partitions_is_refused(kafka_bootstrap: str,
                                                    tmp_path: Path) -> None:
    source, narrow = _name("source"), _name("narrow")
    create_topics(kafka_bootstrap, {source: 3, narrow: 2})
    _produce(kafka_bootstrap, source, _produced(int(time.time() * 1000))[:30])
    path = tmp_path / "r.ndjson.gz"
    _cli("export", "--bootstrap", kafka_bootstrap, "--topic", source, "--out", str(path))
    result = _cli("import", str(path), "--bootstrap", kafka_bootstrap, "--topic", narrow,
                  ok=False)
    assert result.exit_code == 1
    assert f"topic '{narrow}' has 2 partitions; the recording needs 3" in result.output
    assert "--topic NAME" in result.output
    missing = _cli("import", str(path), "--bootstrap", kafka_bootstrap, "--topic",
                   _name("absent"), "--no-create", ok=False)
    assert "does not exist" in missing.output


class VirtualClock(PaceClock):
    """An injected clock: waiting jumps to the due time at once and records it."""

    def __init__(self, wall: float) -> None:
        self.now, self.wall_start, self.dues = 100.0, wall, []

    def wall(self) -> float:
        return self.wall_start + self.now - 100.0

    def monotonic(self) -> float:
        return self.now

    def wait_until(self, due: float, poll: Any) -> None:
        self.dues.append(due - 100.0)
        poll(0)
        self.now = max(self.now, due)


def test_timestamps_are_restamped_on_request_and_pace_takes_the_recorded_time(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    source = _name("source")
    create_topics(kafka_bootstrap, {source: 1})
    base = int(time.time() * 1000) - 3_600_000  # an hour ago, 3 s of records
    records = [TopicRecord(0, -1, None, f"{i}".encode(), base + 100 * i, "CreateTime")
               for i in range(31)]
    _produce(kafka_bootstrap, source, records)
    path = tmp_path / "r.ndjson.gz"
    _cli("export", "--bootstrap", kafka_bootstrap, "--topic", source, "--out", str(path))

    def imported(clock: PaceClock | None = None, **options: Any) -> list[int]:
        topic, out = _name("copy"), tmp_path / f"{uuid.uuid4().hex}.ndjson.gz"
        import_recording(kafka_bootstrap, path, topic=topic, clock=clock, **options)
        _cli("export", "--bootstrap", kafka_bootstrap, "--topic", topic, "--out", str(out))
        return [r.timestamp for r in _lines(out)[1]]

    paced = VirtualClock(time.time())
    assert imported(paced, speed=1.0) == [r.timestamp for r in records]
    assert paced.dues == pytest.approx([0.1 * i for i in range(31)])  # the recorded times
    before = int(time.time() * 1000)
    stamps = imported(timestamps="now")
    assert all(s >= before - 1000 for s in stamps)  # stamped at import
    shifted = VirtualClock(wall=7_000_000.0)  # the import "starts" at 7·10⁶ s
    stamps = imported(shifted, timestamps="shift", speed=3.0)
    assert shifted.dues == pytest.approx([0.1 * i / 3 for i in range(31)])  # 3× the rate
    assert stamps == [7_000_000_000 + 100 * i for i in range(31)]
    # the command's flags reach the same code: --pace --speed 30 takes about 0.1 s here
    topic = _name("cli")
    _cli("import", str(path), "--bootstrap", kafka_bootstrap, "--topic", topic,
         "--timestamps", "shift", "--pace", "--speed", "30")
    assert len(read_topic(kafka_bootstrap, topic)) == 31


def test_log_append_time_is_recorded_and_imported_as_create_time(kafka_bootstrap: str,
                                                                 tmp_path: Path) -> None:
    ck_admin = pytest.importorskip("confluent_kafka.admin")
    source, copy = _name("appended"), _name("copy")
    admin = ck_admin.AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([ck_admin.NewTopic(source, 1, 1, config={
        "message.timestamp.type": "LogAppendTime"})])[source].result(30)
    create_topics(kafka_bootstrap, {copy: 1})  # an existing topic with enough partitions
    _produce(kafka_bootstrap, source, [TopicRecord(0, -1, b"k", b"v", 5, "CreateTime")] * 3)
    first, second = tmp_path / "a.ndjson.gz", tmp_path / "b.ndjson.gz"
    _cli("export", "--bootstrap", kafka_bootstrap, "--topic", source, "--out", str(first))
    _cli("import", str(first), "--bootstrap", kafka_bootstrap, "--topic", copy)
    _cli("export", "--bootstrap", kafka_bootstrap, "--topic", copy, "--out", str(second))
    recorded, again = _lines(first)[1], _lines(second)[1]
    assert {r.timestamp_type for r in recorded} == {"LogAppendTime"}
    assert all(r.timestamp > 5 for r in recorded)  # the broker's time, not the producer's
    assert [r._replace(timestamp_type="CreateTime") for r in recorded] == again


def test_a_recording_streams_through_a_pipe(kafka_bootstrap: str) -> None:
    """``export --out -`` | ``import -``: the recording never touches the disk."""
    source, copy = _name("piped"), _name("copy")
    create_topics(kafka_bootstrap, {source: 2})
    produced = _produced(int(time.time() * 1000))[:100]
    _produce(kafka_bootstrap, source, [r._replace(partition=r.partition % 2) for r in produced])
    exported = CliRunner().invoke(topics, ["export", "--bootstrap", kafka_bootstrap, "--topic",
                                           source, "--out", "-"], catch_exceptions=False)
    assert exported.exit_code == 0 and exported.stdout_bytes[:2] == b"\x1f\x8b"  # gzip
    assert b"exported 100 records" in exported.stderr_bytes
    imported = CliRunner().invoke(topics, ["import", "-", "--bootstrap", kafka_bootstrap,
                                           "--topic", copy], input=exported.stdout_bytes,
                                  catch_exceptions=False)
    assert imported.exit_code == 0, imported.output
    assert "imported 100 records" in imported.stderr
    assert [r._replace(offset=-1) for r in read_topic(kafka_bootstrap, copy)] == [
        r._replace(offset=-1) for r in read_topic(kafka_bootstrap, source)]


def test_a_record_above_the_clients_limit_fails_naming_it(kafka_bootstrap: str,
                                                         tmp_path: Path) -> None:
    path = tmp_path / "big.ndjson.gz"
    header = RecordingHeader(topic=_name("big"), partitions=1)
    with RecordingWriter(path, header) as writer:
        writer.write(TopicRecord(0, 0, None, b"small", 1, "CreateTime"))
        writer.write(TopicRecord(0, 1, None, bytes(1_500_000), 2, "CreateTime"))
    result = _cli("import", str(path), "--bootstrap", kafka_bootstrap, ok=False)
    assert result.exit_code == 1
    assert "the record recorded at 0/1 cannot be written" in result.output
    assert "max.message.bytes" in result.output
