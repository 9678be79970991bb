"""Unit tests of the ``dpsynth`` command line: the demo's outputs and its key hygiene.

The benchmarks are commands, not timed tests: only their ``--help`` is checked here.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpsynth.cli import CSV_COLUMNS, DEMO_KEY, KEY_ENV, main, tick_sizes
from dpsynth.clock import TickClock

SECRET_HEX = "5e" * 16 + "c4" * 16  # a stand-in private key; must never appear in any output


def _run_demo(out: Path, *args: str) -> str:
    result = CliRunner().invoke(main, ["demo", "--ticks", "20", "--out", str(out), *args])
    assert result.exit_code == 0, result.output
    return result.output


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)


def test_demo_writes_csv_and_png(tmp_path: Path, no_env_key: None) -> None:
    output = _run_demo(tmp_path / "out")
    counters, png = tmp_path / "out" / "counters.csv", tmp_path / "out" / "counters.png"
    assert counters.is_file() and png.is_file()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = _rows(counters)
    assert len(rows) == 20  # one row per tick
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [int(r["tick"]) for r in rows] == list(range(1, 21))
    assert sum(int(r["tick_records"]) for r in rows) == int(rows[-1]["true_total"])
    assert len(_rows(tmp_path / "out" / "cells.csv")) == 2**12
    assert "DEMO key" in output
    assert DEMO_KEY.hex() not in output


def test_demo_never_prints_env_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET_HEX)
    output = _run_demo(tmp_path / "out")
    assert SECRET_HEX not in output.lower()
    assert "fingerprint" in output
    for name in ("counters.csv", "cells.csv"):
        assert SECRET_HEX not in (tmp_path / "out" / name).read_text().lower()


def test_demo_is_reproducible_and_keyed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    _run_demo(tmp_path / "a")
    _run_demo(tmp_path / "b")
    monkeypatch.setenv(KEY_ENV, SECRET_HEX)
    _run_demo(tmp_path / "c")
    a, b, c = ((tmp_path / d / "cells.csv").read_text() for d in "abc")
    assert a == b  # same seed, same key: byte-identical release
    assert a != c  # another key: other noise


@pytest.mark.parametrize("bad", ["abc", "zz" * 32])
def test_demo_rejects_malformed_key_without_echoing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv(KEY_ENV, bad)
    result = CliRunner().invoke(main, ["demo", "--ticks", "1", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert KEY_ENV in result.output and "64 hex" in result.output
    assert bad not in result.output


def test_tick_sizes_follow_the_clock() -> None:
    clock = TickClock(epsilon=1.0, release_every=1000)
    sizes = tick_sizes(clock, 12, 40)
    ends = [clock.level_start(12) - 1 + sum(n for _, n in sizes[: i + 1]) for i in range(40)]
    assert ends == [e for e in clock.tick_ends(ends[-1]) if e >= clock.level_start(12)]


def test_help_lists_commands() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "bench" in result.output and "demo" in result.output
    result = CliRunner().invoke(main, ["bench", "--help"])
    assert result.exit_code == 0 and "--repeats" in result.output
