"""Unit tests of the ``dpsynth`` command line: run, inspect, eval, the demo, and key hygiene.

The benchmarks are commands, not timed tests: only their ``--help`` is checked here.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpsynth.cli import DEMO_KEY, KEY_ENV, KEY_FILE_ENV, main
from dpsynth.cli.demo import CSV_COLUMNS, tick_sizes
from dpsynth.clock import TickClock
from dpsynth.release import read_release_file

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
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)


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
    assert "demo" in result.output and "worker" in result.output
    assert "bench" not in result.output  # benchmarks live outside the package


# -- dpsynth run / inspect / eval ------------------------------------------------------------

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "example-schema.json"
RUN_ARGS = ("--points", "3000", "--release-every", "1000", "--w1-points", "300")
PNG = b"\x89PNG\r\n\x1a\n"


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def generated_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """One default-style run (generated stream, public demo key), shared by several tests."""
    out = tmp_path_factory.mktemp("run") / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(KEY_ENV, raising=False)
        mp.delenv(KEY_FILE_ENV, raising=False)
        yield out, _invoke("run", *RUN_ARGS, "--out", str(out))


def test_run_writes_releases_summary_and_plots(generated_run: tuple[Path, str]) -> None:
    out, output = generated_run
    files = sorted((out / "releases").glob("release-*.bin"))
    assert [f.name for f in files] == [f"release-{i:06d}.bin" for i in (1, 2, 3)]
    for sequence, path in enumerate(files, start=1):
        release = read_release_file(path)
        assert release.t == 1000 * sequence
        points = release.points
        assert points.shape == (release.t, 2)  # exactly t points
        assert ((points >= 0) & (points <= 1)).all()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["t"] == 3000 and summary["releases"] == 3
    assert summary["epsilon"] == 1.0 and summary["mechanism"] == "guided"  # "auto"
    assert summary["rejected"] == 0 and summary["clipped"] == 0
    final = summary["w1_final"]
    assert final["exact_subsampled"] and final["exact_points"] == 300
    assert final["sliced_lower"] <= final["exact"] + 0.05 and final["exact"] <= final["tree_upper"]
    assert [c["t"] for c in summary["w1_over_t"]] == [1000, 2000, 3000]
    for name in ("true-vs-synthetic.png", "w1-over-t.png"):
        assert (out / name).read_bytes()[:8] == PNG
    assert (out / "dead-letter.ndjson").read_text() == ""
    assert "WARNING" in output and "DEMO key" in output and "subsamples of 300" in output
    assert DEMO_KEY.hex() not in output


def test_same_key_same_releases(generated_run: tuple[Path, str], tmp_path: Path,
                                no_env_key: None) -> None:
    out, _ = generated_run
    _invoke("run", *RUN_ARGS, "--out", str(tmp_path / "again"))
    for path in (out / "releases").glob("*.bin"):
        assert path.read_bytes() == (tmp_path / "again" / "releases" / path.name).read_bytes()


def test_run_with_release_growth_writes_the_grown_releases(tmp_path: Path,
                                                          no_env_key: None) -> None:
    """--release-growth: releases at the grown steps' ends (100, 200 … 800, 1000 … 1600,
    2000, 2400), their records behind each in summary.json; refused beside a time column."""
    output = _invoke("run", "--points", "2400", "--release-every", "100", "--release-growth",
                     "0.25", "--w1-points", "300", "--out", str(tmp_path / "out"))
    assert "growing to 0.25·t" in output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    behind = [fed for _, fed in summary["records_behind_releases"]]
    assert behind == [*range(100, 900, 100), 1000, 1200, 1400, 1600, 2000, 2400]
    assert summary["release_growth"] == 0.25
    for sequence, fed in enumerate(behind, start=1):
        release = read_release_file(tmp_path / "out" / "releases" / f"release-{sequence:06d}.bin")
        assert release.t == fed and release.metadata["release_growth"] == 0.25
    (tmp_path / "events.csv").write_text("ts,x,y\n2026-01-01T00:00:01,0.5,0.5\n")
    refused = CliRunner().invoke(main, ["run", "--input", str(tmp_path / "events.csv"),
                                        "--release-growth", "0.1", "--time-column", "ts",
                                        "--time-origin", "2026-01-01T00:00:00",
                                        "--time-period", "60", "--time-end",
                                        "2026-01-02T00:00:00", "--out", str(tmp_path / "x")])
    assert refused.exit_code != 0 and "--release-growth" in refused.output


def test_inspect_prints_header_and_points(generated_run: tuple[Path, str]) -> None:
    out, _ = generated_run
    path = out / "releases" / "release-000002.bin"
    release = read_release_file(path)
    output = _invoke("inspect", str(path), "--points", "4")
    # the default run id is derived from the key: one run id per key (P13)
    fingerprint = release.metadata["key_fingerprint"]
    assert "run_id" in output and f"run-{fingerprint}" in output and "sequence" in output
    assert f"{release.t:,}" in output and f"{release.depth} (" in output
    assert f"{int(np.count_nonzero(release.leaf_counts)):,}" in output
    assert "first 4 of 2,000 points" in output
    assert "metadata.epsilon" in output and "key_fingerprint" in output


def test_eval_reports_every_measure(generated_run: tuple[Path, str], tmp_path: Path) -> None:
    out, _ = generated_run
    report = tmp_path / "eval.json"
    output = _invoke("eval", str(out / "releases" / "release-000003.bin"), "--points", "3000",
                     "--w1-points", "300", "--boxes", "20", "--json", str(report))
    for label in ("W1 exact", "tree upper", "sliced lower", "i.i.d. floor", "small boxes",
                  "medium boxes", "large boxes", "subsamples of 300"):
        assert label in output
    result = json.loads(report.read_text())
    assert result["t"] == 3000 and result["exact_subsampled"]
    assert set(result["range_queries"]) == {"small", "medium", "large"}


def test_eval_refuses_an_input_shorter_than_t(generated_run: tuple[Path, str]) -> None:
    out, _ = generated_run
    result = CliRunner().invoke(main, ["eval", str(out / "releases" / "release-000003.bin"),
                                       "--points", "2000"])
    assert result.exit_code != 0 and "fewer than the release's t = 3,000" in result.output


def _write_events_csv(path: Path, n: int) -> list[str]:
    """CSV in the example schema's units; row 5 holds NaN, row 9 misses `lon`, row 12 a word.

    Returns the distinctive values written in the bad rows (they must never be echoed).
    """
    rng = np.random.default_rng(5)
    lat, lon = rng.uniform(40.6, 40.9, n), rng.uniform(-74.2, -73.8, n)
    secrets = [f"{lon[5]:.9f}", f"{lat[9]:.9f}", "forty-point-seven"]
    with open(path, "w", newline="") as f:
        f.write("id,lat,lon,note\n")
        for i in range(n):
            row = {5: f"{i},nan,{secrets[0]},x", 9: f"{i},{secrets[1]},,x",
                   12: f"{i},{secrets[2]},{lon[i]:.9f},x"}.get(i, f"{i},{lat[i]},{lon[i]},x")
            f.write(row + "\n")
    return secrets


def test_run_csv_schema_dead_letters_without_values(tmp_path: Path, no_env_key: None) -> None:
    secrets = _write_events_csv(tmp_path / "events.csv", 1203)
    out = tmp_path / "out"
    output = _invoke("run", "--input", str(tmp_path / "events.csv"), "--schema", str(SCHEMA),
                     "--release-every", "600", "--w1-points", "300", "--out", str(out))
    dead = [json.loads(line) for line in (out / "dead-letter.ndjson").read_text().splitlines()]
    assert dead == [
        {"index": 5, "reason": "field 'lat' must be finite (NaN and ±inf are rejected)"},
        {"index": 9, "reason": "field 'lon' is missing"},
        {"index": 12, "reason": "field 'lat' must be a number, not str"},
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["records_read"] == 1203 and summary["records_accepted"] == 1200
    assert summary["rejected"] == 3 and summary["t"] == 1200 and summary["releases"] == 2
    assert summary["columns"] == ["lat", "lon"]
    for text in [output, (out / "dead-letter.ndjson").read_text()]:
        assert not any(secret in text for secret in secrets)
    assert read_release_file(out / "releases" / "release-000002.bin").points.shape == (1200, 2)
    shown = _invoke("inspect", str(out / "releases" / "release-000001.bin"), "--points", "3",
                    "--schema", str(SCHEMA))
    assert "original units" in shown and "lat" in shown and "40." in shown
    evaluated = _invoke("eval", str(out / "releases" / "release-000002.bin"), "--input",
                        str(tmp_path / "events.csv"), "--schema", str(SCHEMA),
                        "--w1-points", "300", "--boxes", "20")
    assert "all points" in evaluated and "t = 1,200" in evaluated


def _csv(path: Path, rows: np.ndarray, header: str = "u,v") -> Path:
    path.write_text(header + "\n" + "".join(f"{a},{b}\n" for a, b in rows))
    return path


def test_run_csv_without_schema_takes_the_header_columns(tmp_path: Path,
                                                          no_env_key: None) -> None:
    rows = np.random.default_rng(2).random((500, 2))
    rows[7, 0] = 1.5  # outside [0,1]: clipped
    out = tmp_path / "out"
    output = _invoke("run", "--input", str(_csv(tmp_path / "p.csv", rows)), "--release-every",
                     "250", "--w1-points", "300", "--out", str(out))
    assert "header columns u, v" in output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["columns"] == ["u", "v"] and summary["clipped"] == 1
    assert summary["t"] == 500


@pytest.mark.parametrize("command", ["run", "offline"])
def test_a_column_never_disappears_because_of_a_value(tmp_path: Path, no_env_key: None,
                                                      command: str) -> None:
    """Issue 13: the columns come from the header, never from the values. A neighbouring file
    whose one row holds "n/a" gives a release of the same dimension; that row is rejected."""
    rows = np.random.default_rng(3).random((400, 2)).astype(object)
    neighbour = rows.copy()
    neighbour[5, 1] = "n/a"
    shapes = []
    for name, data in (("a", rows), ("b", neighbour)):
        path = _csv(tmp_path / f"{name}.csv", data, header="x,y")
        out = tmp_path / name
        args = (["--release-every", "100", "--w1-points", "300", "--out", str(out)]
                if command == "run" else ["--out", str(out / "s.csv")])
        output = _invoke(command, "--input", str(path), *args)
        if command == "run":
            assert "header columns x, y" in output
            release = read_release_file(out / "releases" / "release-000003.bin")
            shapes.append((release.metadata["d"], release.points.shape[1]))
            rejects = (out / "dead-letter.ndjson").read_text().splitlines()
            assert len(rejects) == (name == "b")
        else:
            shapes.append(json.loads((out / "s.csv.meta.json").read_text())["d"])
    assert shapes[0] == shapes[1]


def test_ndjson_without_schema_is_refused(tmp_path: Path, no_env_key: None) -> None:
    lines = [json.dumps({"u": 0.1, "v": 0.2})] * 50
    (tmp_path / "points.ndjson").write_text("\n".join(lines) + "\n")
    for command, out in (("run", tmp_path / "run"), ("offline", tmp_path / "s.csv")):
        result = CliRunner().invoke(main, [command, "--input", str(tmp_path / "points.ndjson"),
                                           "--out", str(out)])
        assert result.exit_code == 1 and "--schema" in result.output
        assert not out.exists()


def test_run_names_a_missing_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     no_env_key: None) -> None:
    monkeypatch.setenv("DPSYNTH_DATA_DIR", str(tmp_path / "nowhere"))
    missing = tmp_path / "nowhere" / "gowalla_nyc" / "gowalla_events.csv.gz"
    result = CliRunner().invoke(main, ["run", "--dataset", "gowalla", "--out", str(tmp_path)])
    assert result.exit_code != 0 and str(missing) in result.output


def test_run_refuses_a_bad_epsilon_cleanly(tmp_path: Path, no_env_key: None) -> None:
    result = CliRunner().invoke(main, ["run", *RUN_ARGS, "--epsilon", "-1", "--out",
                                       str(tmp_path)])
    assert result.exit_code != 0 and "epsilon" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("via", ["env", "file"])
def test_run_inspect_eval_never_reveal_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, via: str
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    if via == "env":
        monkeypatch.setenv(KEY_ENV, SECRET_HEX)
    else:
        (tmp_path / "key.hex").write_text(SECRET_HEX + "\n")
        monkeypatch.setenv(KEY_FILE_ENV, str(tmp_path / "key.hex"))
    out = tmp_path / "out"
    outputs = [_invoke("run", *RUN_ARGS, "--out", str(out))]
    assert "fingerprint" in outputs[0] and "WARNING" not in outputs[0]
    release = out / "releases" / "release-000003.bin"
    outputs.append(_invoke("inspect", str(release), "--points", "5"))
    outputs.append(_invoke("eval", str(release), "--points", "3000", "--w1-points", "300",
                           "--boxes", "10"))
    for output in outputs:
        assert SECRET_HEX not in output.lower()
    raw = bytes.fromhex(SECRET_HEX)
    for path in out.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert raw not in data and SECRET_HEX.encode() not in data.lower(), path
    monkeypatch.delenv(KEY_ENV, raising=False)  # the public demo key gives other noise
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    _invoke("run", *RUN_ARGS, "--out", str(tmp_path / "demo"))
    assert (tmp_path / "demo" / "releases" / release.name).read_bytes() != release.read_bytes()


def test_run_refuses_a_bad_key_file_without_echoing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    (tmp_path / "key").write_text("not-a-key-" + SECRET_HEX[:20])
    monkeypatch.setenv(KEY_FILE_ENV, str(tmp_path / "key"))
    result = CliRunner().invoke(main, ["run", *RUN_ARGS, "--out", str(tmp_path / "out")])
    assert result.exit_code != 0 and KEY_FILE_ENV in result.output
    assert SECRET_HEX[:20] not in result.output


def test_help_lists_the_product_commands() -> None:
    output = _invoke("--help")
    for command in ("run", "inspect", "eval", "offline", "tabular", "worker", "produce",
                    "consume", "demo"):
        assert command in output

@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help_import_neither_numpy_nor_numba(args: list[str]) -> None:
    """A newcomer's first command answers at once: no NumPy, no Numba (compiled kernels)."""
    import subprocess
    import sys

    code = ("import sys\nfrom dpsynth.cli import main\ntry:\n"
            f"    main({args!r})\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'numba')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,  # noqa: S603
                         check=True, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-500:]
