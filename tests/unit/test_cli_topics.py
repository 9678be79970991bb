"""``dpsynth topics export`` / ``import`` without a broker: usage errors name the fix;
``match-letter`` on a recording.

Against a real broker: ``tests/integration/test_topics.py``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgpack
import pytest
from click.testing import CliRunner

from dpsynth.cli import main
from dpsynth.client.recording import RecordingHeader, RecordingWriter, TopicRecord
from dpsynth.keys import NoiseKey
from dpsynth.stream.codecs import DeadLetterHasher, encode_dead_letter
from dpsynth.testing.recordings import example_recording


@pytest.fixture
def no_broker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KAFKA_BOOTSTRAP_SERVERS", "DPSYNTH_BROKER"):
        monkeypatch.delenv(name, raising=False)


def _invoke(*args: str) -> object:
    return CliRunner().invoke(main, ["topics", *args])


def test_topics_group_lists_export_import_and_match_letter() -> None:
    result = _invoke("--help")
    assert result.exit_code == 0
    assert all(name in result.output for name in ("export", "import", "match-letter"))


def test_a_missing_broker_address_is_a_usage_error(no_broker_env: None) -> None:
    for args in (["export", "--topic", "t"], ["import", str(example_recording())]):
        result = _invoke(*args)
        assert result.exit_code == 2
        assert "no broker: pass --bootstrap HOST:PORT or set KAFKA_BOOTSTRAP_SERVERS" \
            in result.output


def test_bad_arguments_are_refused_before_any_broker_is_asked(tmp_path: Path) -> None:
    missing = _invoke("import", str(tmp_path / "absent.ndjson.gz"), "--bootstrap", "h:1")
    assert missing.exit_code == 2 and "is not a file" in missing.output
    config = _invoke("import", str(example_recording()), "--bootstrap", "h:1",
                     "--config", "retention.ms")
    assert config.exit_code == 2 and "'retention.ms' must be KEY=VALUE" in config.output
    speed = _invoke("import", str(example_recording()), "--bootstrap", "h:1", "--speed", "0")
    assert speed.exit_code == 2
    role = _invoke("export", "--topic", "t", "--bootstrap", "h:1", "--role", "secret")
    assert role.exit_code == 2


def test_a_file_that_is_not_a_recording_is_refused_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "events.csv"
    path.write_text("x,y\n0.1,0.2\n")
    result = _invoke("import", str(path), "--bootstrap", "127.0.0.1:1")
    assert result.exit_code == 1
    assert "line 1 is not a recording header" in result.output


def test_match_letter_finds_a_messages_dead_letter_with_the_runs_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 44: only the key's holder can match a message to its letter; old letters (format
    2) still match by their unsalted digest; letters of another key are skipped."""
    key, other = NoiseKey(bytes(range(32))), NoiseKey(bytes(range(1, 33)))
    message = msgpack.packb({"x": 0.5})

    def letter(value: bytes, offset: int, under: NoiseKey = key) -> bytes:
        return encode_dead_letter(value=value, topic="raw", partition=1, offset=offset,
                                  timestamp_ms=0, rejects=[(0, "field 'y' is missing")],
                                  n_records=1, hasher=DeadLetterHasher(under))

    old = msgpack.packb({"format": 2, "topic": "raw", "partition": 0, "offset": 2, "reason": "r",
                         "n_rejects": 1, "n_records": 3, "length": len(message),
                         "sha256": hashlib.sha256(message).hexdigest()})
    values = [letter(message, 7), letter(b"\xc1", 8), letter(message, 9, other), old, b"\xc1"]
    recording = tmp_path / "dead.ndjson.gz"
    with RecordingWriter(recording, RecordingHeader("dead", 2, role="dead-letter")) as writer:
        for offset, value in enumerate(values):
            writer.write(TopicRecord(0, offset, None, value, 0, "CreateTime"))
    (tmp_path / "message.bin").write_bytes(message)
    monkeypatch.setenv("DPSYNTH_NOISE_KEY", key.reveal().hex())
    monkeypatch.delenv("DPSYNTH_NOISE_KEY_FILE", raising=False)
    result = CliRunner().invoke(main, ["topics", "match-letter", str(tmp_path / "message.bin"),
                                       "--recording", str(recording)])
    assert result.exit_code == 0, result.output
    digest = DeadLetterHasher(key).digest(message)
    assert result.stdout.splitlines() == [
        f"hmac_sha256 {digest} (key fingerprint {key.fingerprint})",
        "raw/1/7: format 3, 1 of 1 records rejected: field 'y' is missing",
        "raw/0/2: format 2, 1 of 3 records rejected: r",
    ]
    assert "skipped 1 letters written under another key" in result.stderr
    assert "skipped 1 records that are not dead letters" in result.stderr
    assert key.reveal().hex() not in result.output
    piped = CliRunner().invoke(main, ["topics", "match-letter", "-"], input=message)
    assert piped.exit_code == 0 and piped.stdout.split()[1] == digest
    monkeypatch.delenv("DPSYNTH_NOISE_KEY")
    missing = CliRunner().invoke(main, ["topics", "match-letter", "-"], input=message)
    assert missing.exit_code == 1 and "DPSYNTH_NOISE_KEY is not set" in missing.output
