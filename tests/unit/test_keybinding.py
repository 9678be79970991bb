"""P13: a private key is bound to the input and settings of its first run; another is refused.

Every test has its own ``DPSYNTH_STATE_DIR`` (``key_state_dir`` in tests/conftest.py).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from dpsynth.cli import main
from dpsynth.errors import ConfigError
from dpsynth.keybinding import NEW_KEY, STATE_DIR_ENV, KeyUse, bind_key, record_path, state_dir
from dpsynth.keys import KEY_ENV, KEY_FILE_ENV, NoiseKey
from dpsynth.stream.runcheck import check_run_input

SECRET_HEX = "3c" * 16 + "a7" * 16
KEY = NoiseKey(bytes.fromhex(SECRET_HEX), source="test")
FAST = ("--max-depth", "8", "--release-every", "100", "--no-report")


@pytest.fixture
def private_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET_HEX)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)


def _csv(path: Path, n: int, seed: int = 0) -> Path:
    rows = np.random.default_rng(seed).random((n, 2))
    path.write_text("x,y\n" + "".join(f"{a:.5f},{b:.5f}\n" for a, b in rows.tolist()))
    return path


def _run(data: Path, out: Path, *extra: str) -> Result:
    return CliRunner().invoke(main, ["run", "--input", str(data), *FAST, "--out", str(out),
                                     *extra])


def test_P13_the_same_key_over_another_input_is_refused_naming_the_fix(
        tmp_path: Path, private_key: None, key_state_dir: Path) -> None:
    data = _csv(tmp_path / "d.csv", 300)
    first = _run(data, tmp_path / "a")
    assert first.exit_code == 0, first.output
    again = _run(data, tmp_path / "b")  # the same run again: allowed, the same bytes
    assert again.exit_code == 0, again.output
    assert [p.read_bytes() for p in sorted((tmp_path / "a" / "releases").iterdir())] == [
        p.read_bytes() for p in sorted((tmp_path / "b" / "releases").iterdir())]
    grown = tmp_path / "d2.csv"
    grown.write_text(data.read_text() + "0.50000,0.50000\n")  # D ∪ {x}
    refused = _run(grown, tmp_path / "c")
    assert refused.exit_code == 1
    message = " ".join(refused.stderr.split())
    assert "already ran over another input" in message and NEW_KEY in message
    assert not (tmp_path / "c").exists()  # refused before anything is written
    for other in (("--epsilon", "2"), ("--limit", "299")):  # other settings, fewer records
        result = _run(data, tmp_path / "e", *other)
        assert result.exit_code == 1 and "already ran over" in result.stderr, other
    offline = CliRunner().invoke(main, ["offline", "--input", str(grown),
                                        "--out", str(tmp_path / "s.csv")])
    assert offline.exit_code == 1 and "already ran over another input" in offline.stderr
    record = record_path(KEY, key_state_dir)
    text = record.read_text()
    assert SECRET_HEX not in text and hashlib.sha256(data.read_bytes()).hexdigest() not in text
    assert json.loads(text)["key_fingerprint"] == KEY.fingerprint
    for output in (first, again, refused):
        assert SECRET_HEX not in output.output


def test_P13_tabular_run_binds_its_key_too(tmp_path: Path, private_key: None) -> None:
    domain = Path(__file__).resolve().parents[2] / "examples" / "adult.domain.json"
    lines = (Path(__file__).resolve().parents[2] / "examples" / "adult.csv").read_text()
    head = lines.splitlines()[:401]
    small, other = tmp_path / "a.csv", tmp_path / "b.csv"
    small.write_text("\n".join(head) + "\n")
    other.write_text("\n".join(head[:-1]) + "\n")

    def tabular(data: Path) -> Result:
        return CliRunner().invoke(main, ["tabular", "run", "--data", str(data), "--domain",
                                         str(domain), "--neighbours", "replace",
                                         "--release-every", "100", "--no-report",
                                         "--out", str(tmp_path / data.stem)])

    assert tabular(small).exit_code == 0
    refused = tabular(other)
    assert refused.exit_code == 1 and "already ran over another input" in refused.stderr


def test_P13_the_demo_key_is_exempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    key_state_dir: Path) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    assert _run(_csv(tmp_path / "a.csv", 200), tmp_path / "a").exit_code == 0
    assert _run(_csv(tmp_path / "b.csv", 201), tmp_path / "b").exit_code == 0
    assert not (key_state_dir / "keys").exists()


def test_P13_a_state_directory_that_cannot_be_written_is_warned_about(
        tmp_path: Path, private_key: None, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / "file" / "state"))
    result = _run(_csv(tmp_path / "a.csv", 200), tmp_path / "a")
    assert result.exit_code == 0, result.output
    assert "could not be recorded" in result.stderr and STATE_DIR_ENV in result.stderr


def test_the_state_directory_is_outside_every_output() -> None:
    assert state_dir({STATE_DIR_ENV: "/srv/state"}) == Path("/srv/state")
    assert state_dir({"XDG_STATE_HOME": "/x"}) == Path("/x/dpsynth")
    assert state_dir({}).parts[-3:] == (".local", "state", "dpsynth")


def test_P13_the_library_binding_compares_input_and_settings_apart(tmp_path: Path) -> None:
    use = KeyUse("a run", {"file": "aa", "limit": None}, {"epsilon": 1.0})
    bind_key(KEY, use, tmp_path)
    bind_key(KEY, use, tmp_path)
    with pytest.raises(ConfigError, match="another input"):
        bind_key(KEY, KeyUse("b", {"file": "ab", "limit": None}, {"epsilon": 1.0}), tmp_path)
    with pytest.raises(ConfigError, match="this input with other settings"):
        bind_key(KEY, KeyUse("c", {"file": "aa", "limit": None}, {"epsilon": 2.0}), tmp_path)
    other = NoiseKey(bytes(range(32)), source="test")  # another key: its own record
    bind_key(other, KeyUse("b", {"file": "ab"}), tmp_path)


def test_P13_the_worker_is_bound_to_its_input_topic(tmp_path: Path) -> None:
    topic = {"topic": "raw", "topic_id": "0f" * 16, "start_offsets": {"0": 0, "1": 7}}
    path = check_run_input(KEY, "run-a", topic, tmp_path)
    check_run_input(KEY, "run-a", {**topic, "start_offsets": {"0": 40, "1": 7}}, tmp_path)
    grown = {**topic, "start_offsets": {"0": 0, "1": 7, "2": 0}}  # a partition added
    check_run_input(KEY, "run-a", grown, tmp_path)
    assert json.loads(path.read_text())["topic_input"]["start_offsets"] == grown[
        "start_offsets"]
    for changed, why in (({**topic, "topic": "raw-2"}, "another input topic"),
                         ({**topic, "topic_id": "1e" * 16}, "created anew"),
                         ({**topic, "start_offsets": {"0": 0, "1": 3}}, "before the run's")):
        with pytest.raises(ConfigError, match=why) as refused:
            check_run_input(KEY, "run-a", changed, tmp_path)
        assert "new key" in str(refused.value) and SECRET_HEX not in str(refused.value)
    bind_key(NoiseKey(bytes(range(32)), source="t"), KeyUse("file", {"file": "aa"}), tmp_path)
    with pytest.raises(ConfigError, match="another input"):  # a key that ran over a file
        check_run_input(NoiseKey(bytes(range(32)), source="t"), "run-b", topic, tmp_path)
