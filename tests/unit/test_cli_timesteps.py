"""``dpsynth run`` with steps from a declared time column (issue 13, docs/privacy.md P11).

Under add/remove a step may end only on a public clock: for files, a time column bucketed from
a declared origin by a declared period up to a declared end. The number of releases and every
metadata field then depend only on the declaration, never on the records.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpsynth.cli import KEY_ENV, KEY_FILE_ENV, main
from dpsynth.cli.timesteps import TimeSteps
from dpsynth.release import read_release_file

TIME = ["--time-column", "ts", "--time-origin", "0", "--time-period", "10"]


@pytest.fixture(autouse=True)
def _demo_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)


def _file(path: Path, n: int, seed: int, extra: str = "") -> Path:
    rng = np.random.default_rng(seed)  # public test data
    ts, xy = rng.uniform(0, 100, n).tolist(), rng.random((n, 2)).tolist()
    path.write_text("ts,x,y\n" + "".join(f"{t!r},{a!r},{b!r}\n" for t, (a, b) in
                                         zip(ts, xy, strict=True)) + extra)
    return path


def _run(*args: str) -> str:
    result = CliRunner().invoke(main, ["run", "--w1-points", "200", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _releases(out: Path) -> list:
    return [read_release_file(p) for p in sorted((out / "releases").glob("release-*.bin"))]


def test_P11_add_remove_without_public_time_is_refused_naming_the_fix(tmp_path: Path) -> None:
    data = _file(tmp_path / "d.csv", 50, 0)
    for extra, fix in (([], "--time-column"), (TIME, "--time-end")):
        result = CliRunner().invoke(main, ["run", "--input", str(data), "--neighbours",
                                           "add_remove", *extra, "--out", str(tmp_path / "o")])
        assert result.exit_code == 2 and fix in result.output


def test_P11_steps_come_from_the_declared_grid_not_from_the_records(tmp_path: Path) -> None:
    bad = "5.0,0.5\nsoon,0.1,0.2\n150,0.1,0.2\n-1,0.3,0.3\n"  # missing y, bad time, late, early
    data = _file(tmp_path / "d.csv", 600, 1, extra=bad)
    neighbour = _file(tmp_path / "n.csv", 601, 1)  # the same records and one more (late)
    runs = {}
    for name, path in (("d", data), ("n", neighbour)):
        out = tmp_path / name
        _run("--input", str(path), "--neighbours", "add_remove", *TIME, "--time-end", "120",
             "--out", str(out))
        runs[name] = (_releases(out), json.loads((out / "summary.json").read_text()))
    releases, summary = runs["d"]
    assert len(releases) == 12 == summary["time_steps"]["steps"]  # ⌈(120 − 0)/10⌉, declared
    assert len(runs["n"][0]) == 12
    for a, b in zip(releases, runs["n"][0], strict=True):
        assert a.metadata["step"] == b.metadata["step"]
        assert a.metadata["release_every"] is None is b.metadata["release_every"]
        assert a.t == int(a.leaf_counts.sum())  # the released size is noisy
        assert {k for k in a.metadata} == {k for k in b.metadata}
    assert summary["neighbours"] == "add_remove" and summary["rejected"] == 4
    dead = (tmp_path / "d" / "dead-letter.ndjson").read_text()
    assert "outside the declared" in dead and "ISO 8601" in dead and "'y' is missing" in dead
    assert "150" not in dead and "soon" not in dead  # rules, never values
    behind = [fed for _, fed in summary["records_behind_releases"]]
    assert behind[-1] == 600 and behind == sorted(behind)


def test_under_replace_a_time_column_gives_exact_sizes_per_step(tmp_path: Path) -> None:
    data = _file(tmp_path / "d.csv", 300, 2)
    out = tmp_path / "out"
    _run("--input", str(data), *TIME, "--out", str(out))  # replace; end: after the last record
    summary = json.loads((out / "summary.json").read_text())
    releases = _releases(out)
    assert len(releases) == 10 and summary["columns"] == ["x", "y"]  # ts is no coordinate
    assert [r.t for r in releases] == [fed for _, fed in summary["records_behind_releases"]]
    assert releases[-1].t == 300


def test_eval_of_an_add_remove_release_needs_the_records_behind_it(tmp_path: Path) -> None:
    data = _file(tmp_path / "d.csv", 200, 3)
    out = tmp_path / "out"
    _run("--input", str(data), "--neighbours", "add_remove", *TIME, "--time-end", "100",
         "--out", str(out))
    release = str(out / "releases" / "release-000010.bin")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"version": 1, "columns": [
        {"name": "x", "lower": 0, "upper": 1}, {"name": "y", "lower": 0, "upper": 1}]}))
    args = ["eval", release, "--input", str(data), "--schema", str(schema), "--w1-points",
            "200", "--boxes", "10"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "--records" in result.output
    result = CliRunner().invoke(main, [*args, "--records", "200"])
    assert result.exit_code == 0 and "W1 exact" in result.output


def test_time_parsing_and_buckets() -> None:
    steps = TimeSteps("ts", 0.0, 60.0, 180.0)
    bucket, rejects = steps.buckets([{"ts": 0}, {"ts": "1970-01-01T00:02:59"}, {"ts": 180},
                                     {"ts": True}, {"x": 1}])
    assert bucket.tolist() == [0, 2, -1, -1, -1] and [i for i, _ in rejects] == [2, 3, 4]
    assert steps.n_steps(bucket) == 3
    assert TimeSteps("ts", 0.0, 60.0, None).n_steps(bucket) == 3  # through the latest record


def test_empty_steps_and_empty_releases_do_not_break_the_report(tmp_path: Path) -> None:
    # the first three declared steps hold no record: their releases have nothing behind them
    # (and under add/remove often a noisy size of 0), which once crashed the W1 curve
    data = tmp_path / "d.csv"
    data.write_text("ts,x,y\n" + "".join(f"{30 + i % 50},0.4,0.6\n" for i in range(120)))
    out = tmp_path / "out"
    _run("--input", str(data), "--neighbours", "add_remove", *TIME, "--time-end", "80",
         "--out", str(out))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["records_behind_releases"][:3] == [[1, 0], [2, 0], [3, 0]]
    assert all(point["t"] > 0 for point in summary["w1_over_t"])
    bare = tmp_path / "bare"
    _run("--input", str(data), "--neighbours", "add_remove", *TIME, "--time-end", "80",
         "--out", str(bare), "--no-report")
    assert sorted(p.name for p in bare.iterdir()) == ["dead-letter.ndjson", "releases",
                                                      "schema.json"]
    assert [r.t for r in _releases(bare)] == [r.t for r in _releases(out)]
