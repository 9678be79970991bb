"""``dpsynth run`` under the privacy unit "user" (docs/privacy.md P15): columns and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpsynth.cli import KEY_ENV, KEY_FILE_ENV, main
from dpsynth.release import read_release_file


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)


def _csv(path: Path, n: int, users: list[str]) -> Path:
    rng = np.random.default_rng(0)
    lines = ["x,y,person"] + [f"{x:.4f},{y:.4f},{u}" for (x, y), u in
                              zip(rng.random((n, 2)), users, strict=True)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["run", "--w1-points", "200", *args])
    return result.exit_code, " ".join(result.output.split())  # rich wraps long lines


def test_P15_a_file_with_a_user_column_is_bounded_per_user(tmp_path: Path) -> None:
    """"007" and "7" are two users: the column is read as text, never as a number."""
    users = ["007"] * 600 + ["7"] * 600 + [f"u{i}" for i in range(800)]
    data = _csv(tmp_path / "in.csv", 2000, users)
    code, output = _run("--input", str(data), "--privacy-unit", "user", "--user-column",
                        "person", "--max-contributions", "5", "--release-every", "100",
                        "--out", str(tmp_path / "out"))
    assert code == 0, output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["records_accepted"] == 5 + 5 + 800  # "007" and "7" are distinct
    assert summary["records_dropped"] == 1190 and summary["privacy_unit"] == "user"
    assert summary["columns"] == ["x", "y"]  # the user column is not a coordinate
    release = read_release_file(sorted((tmp_path / "out" / "releases").iterdir())[-1])
    assert release.metadata["privacy_unit"] == "user"
    assert release.metadata["max_contributions"] == 5
    assert release.metadata["worst_case_loss"] <= 1.0
    assert "007" not in output and "u17" not in output


def test_P15_the_schema_may_declare_the_user_column(tmp_path: Path) -> None:
    data = _csv(tmp_path / "in.csv", 1500, [f"u{i % 300}" for i in range(1500)])
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"version": 1, "user_column": "person", "columns": [
        {"name": "x", "lower": 0, "upper": 1}, {"name": "y", "lower": 0, "upper": 1}]}))
    code, output = _run("--input", str(data), "--schema", str(schema), "--privacy-unit",
                        "user", "--max-contributions", "2", "--release-every", "100",
                        "--out", str(tmp_path / "out"))
    assert code == 0, output
    assert "1,500 read, 600 accepted" in output  # diagnostics (standard error)
    code, output = _run("--input", str(data), "--schema", str(schema), "--release-every",
                        "100", "--out", str(tmp_path / "rec"))  # record unit: column ignored
    assert code == 0 and "1,500 read, 1,500 accepted" in output


def test_P15_user_level_add_remove_steps_from_a_time_column(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    rows = ["x,y,person,ts"] + [f"{x:.3f},{y:.3f},p{rng.integers(0, 600)},{t}" for (x, y), t in
                                zip(rng.random((3000, 2)), np.sort(rng.integers(0, 100, 3000)),
                                    strict=True)]
    (tmp_path / "in.csv").write_text("\n".join(rows) + "\n")
    code, output = _run("--input", str(tmp_path / "in.csv"), "--neighbours", "add_remove",
                        "--time-column", "ts", "--time-origin", "0", "--time-period", "10",
                        "--time-end", "100", "--privacy-unit", "user", "--user-column",
                        "person", "--max-contributions", "4", "--out", str(tmp_path / "out"))
    assert code == 0, output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["records_accepted"] <= 2400 and summary["releases"] == 10


def test_the_generated_stream_and_gowalla_bring_their_users(tmp_path: Path) -> None:
    code, output = _run("--points", "4000", "--privacy-unit", "user", "--max-contributions",
                        "3", "--release-every", "100", "--out", str(tmp_path / "out"))
    assert code == 0, output
    assert "generated users" in output and "over their user's bound" in output
    code, output = _run("--points", "4000", "--privacy-unit", "user", "--max-contributions",
                        "3", "--user-column", "x", "--out", str(tmp_path / "o2"))
    assert code != 0 and "--user-column names a column of an --input file" in output


@pytest.mark.parametrize(("args", "message"), [
    (["--privacy-unit", "user", "--max-contributions", "4"], "--user-column C"),
    (["--privacy-unit", "user", "--user-column", "person"], "needs max_contributions"),
    (["--max-contributions", "4"], "needs privacy_unit='user'"),
    (["--user-column", "person"], "--user-column ('person') names the user id"),
    (["--privacy-unit", "user", "--user-column", "nope", "--max-contributions", "4"],
     "--user-column 'nope' is not a column"),
    (["--privacy-unit", "user", "--user-column", "person", "--max-contributions", "4",
      "--mechanism", "paper", "--neighbours", "add_remove", "--time-column", "x",
      "--time-origin", "0", "--time-period", "0.1", "--time-end", "1"], "counts time in records"),
])
def test_mistakes_are_refused_with_the_fix(tmp_path: Path, args: list[str], message: str) -> None:
    data = _csv(tmp_path / "in.csv", 300, [f"u{i}" for i in range(300)])
    code, output = _run("--input", str(data), "--out", str(tmp_path / "out"), *args)
    assert code != 0 and message in output, output


@pytest.mark.parametrize("neighbours", ["add_remove", "replace"])
def test_P15_a_user_alone_in_a_time_step_removed_changes_no_exit_code_or_release_count(
        tmp_path: Path, neighbours: str) -> None:
    """Issue 25: step 3 holds only user "loner"; without them the step is empty (it used to
    crash: exit 1 with one release against exit 0 with three)."""
    rng = np.random.default_rng(4)
    rows = [f"{x:.3f},{y:.3f},p{rng.integers(0, 50)},{t}" for (x, y), t in
            zip(rng.random((400, 2)), rng.integers(0, 20, 400), strict=True)]
    rows += [f"{x:.3f},{y:.3f},p{rng.integers(0, 50)},{t}" for (x, y), t in
             zip(rng.random((400, 2)), rng.integers(40, 60, 400), strict=True)]
    loner = [f"{x:.3f},{y:.3f},loner,25" for x, y in rng.random((3, 2))]
    outcomes = []
    for name, body in (("with", rows + loner), ("without", rows)):
        (tmp_path / f"{name}.csv").write_text("\n".join(["x,y,person,ts", *body]) + "\n")
        result = CliRunner().invoke(main, [
            "run", "--w1-points", "200", "--input", str(tmp_path / f"{name}.csv"),
            "--neighbours", neighbours, "--time-column", "ts", "--time-origin", "0",
            "--time-period", "10", "--time-end", "60", "--privacy-unit", "user",
            "--user-column", "person", "--max-contributions", "4",
            "--out", str(tmp_path / name)])
        releases = sorted((tmp_path / name / "releases").iterdir())
        outcomes.append((result.exit_code, len(releases)))
    assert outcomes == [(0, 6), (0, 6)]
