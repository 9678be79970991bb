"""``dpsynth topics export`` / ``import`` without a broker: usage errors name the fix.

Against a real broker: ``tests/integration/test_topics.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dpsynth.cli import main
from dpsynth.testing.recordings import example_recording


@pytest.fixture
def no_broker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KAFKA_BOOTSTRAP_SERVERS", "DPSYNTH_BROKER"):
        monkeypatch.delenv(name, raising=False)


def _invoke(*args: str) -> object:
    return CliRunner().invoke(main, ["topics", *args])


def test_topics_group_lists_export_and_import() -> None:
    result = _invoke("--help")
    assert result.exit_code == 0
    assert "export" in result.output and "import" in result.output


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
