"""A run never succeeds silently, and says on standard output only what is public.

One exit-status table (``dpsynth.cli.errors``, docs/cli.md, ``dpsynth --help``); failures
decidable from the options or the input's header exit 1 naming the cause under both notions;
under replacement a run with no accepted record or no release exits 1; under add/remove
neighbouring inputs give the same exit status and the same standard output (docs/privacy.md
P11), the true counts going to standard error as operator diagnostics; a reused ``--out`` holds
only the new run's outputs.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from dpsynth.cli import main
from dpsynth.cli.errors import ExitCode
from dpsynth.keys import KEY_ENV, KEY_FILE_ENV

ROOT = Path(__file__).resolve().parents[2]
ADD_REMOVE = ("--neighbours", "add_remove", "--time-column", "ts", "--time-origin", "0",
              "--time-period", "10", "--time-end", "40")
FAST = ("--max-depth", "8", "--w1-points", "200")


@pytest.fixture(autouse=True)
def demo_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _csv(path: Path, rows: list[tuple[object, ...]], header: str = "ts,x,y") -> Path:
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def _schema(path: Path, *names: str) -> Path:
    columns = ", ".join(f'{{"name": "{n}", "lower": 0, "upper": 1}}' for n in names)
    path.write_text(f'{{"version": 1, "columns": [{columns}]}}')
    return path


def _rows(n: int, seed: int = 0) -> list[tuple[object, ...]]:
    rng = np.random.default_rng(seed)
    return [(round(float(t), 3), round(float(a), 4), round(float(b), 4))
            for t, (a, b) in zip(np.linspace(0, 39.9, n), rng.random((n, 2)), strict=True)]


# -- the table ------------------------------------------------------------------------------


def test_the_exit_status_table_is_in_the_help_and_the_docs() -> None:
    codes = {int(code) for code in ExitCode}
    help_text = _invoke("--help").output
    assert {int(c) for c in re.findall(r"^\s+(\d)\s{2}", help_text, flags=re.M)} == codes
    for command in (("run",), ("offline",), ("tabular", "run")):
        assert "Exit status:" in _invoke(*command, "--help").output, command
    docs = (ROOT / "docs" / "cli.md").read_text()
    table = docs.split("## Exit status")[1].split("\n## ")[0]
    assert {int(c) for c in re.findall(r"^\| (\d) \|", table, flags=re.M)} == codes


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    for args in (("--epsilon", "0"), ("--epsilon", "abc"), ("--release-every", "0"),
                 ("--no-such-option",), ("--input", str(tmp_path / "absent.csv")),
                 ("--time-column", "ts", "--input", str(_csv(tmp_path / "a.csv", []))),
                 (*ADD_REMOVE[:-1], "0", "--input", str(tmp_path / "a.csv"))):
        result = _invoke("run", "--out", str(tmp_path / "out"), *args)
        assert result.exit_code == ExitCode.USAGE, (args, result.output)


def test_an_internal_error_exits_3_with_its_traceback(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import dpsynth.cli.run

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(dpsynth.cli.run, "w1_bracket", broken)
    result = _invoke("run", "--points", "500", "--release-every", "250", *FAST,
                     "--out", str(tmp_path / "out"))
    assert result.exit_code == ExitCode.RUNTIME
    assert "internal error (ZeroDivisionError)" in result.stderr
    assert "Traceback" in result.stderr


def test_an_output_that_cannot_be_written_exits_3(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = _invoke("run", "--points", "500", "--out", str(tmp_path / "file" / "out"))
    assert result.exit_code == ExitCode.RUNTIME and "file" in result.stderr


# -- decided by the options and the header: exit 1 under both notions -------------------------


@pytest.mark.parametrize("notion", ["replace", "add_remove"])
def test_header_decidable_failures_exit_1_naming_the_cause(tmp_path: Path, notion: str) -> None:
    steps = ADD_REMOVE if notion == "add_remove" else ("--time-column", "ts", "--time-origin",
                                                        "0", "--time-period", "10")
    good = _csv(tmp_path / "good.csv", _rows(20))
    ndjson = tmp_path / "p.ndjson"
    ndjson.write_text('{"x": 0.1, "y": 0.2, "ts": 1}\n')
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 50)
    broken_gz = tmp_path / "broken.csv.gz"
    broken_gz.write_bytes(gzip.compress(b"ts,x,y\n1,0.1,0.2\n")[:15])
    cases = {
        "'lat', 'lon'": ("--input", str(good), "--schema",
                         str(ROOT / "examples" / "points.schema.json")),
        "is NDJSON": ("--input", str(ndjson)),
        "cannot be read": ("--input", str(binary)),
        "cannot be read ": ("--input", str(broken_gz)),
        "no CSV header": ("--input", str(_csv(tmp_path / "ts-only.csv", [], header="ts"))),
    }
    for cause, args in cases.items():
        result = _invoke("run", *args, *steps, *FAST, "--out", str(tmp_path / "out"))
        assert result.exit_code == ExitCode.INPUT, (cause, result.output)
        assert cause.strip() in result.stderr, (cause, result.stderr)
    missing_time = _invoke("run", "--input", str(_csv(tmp_path / "xy.csv", [(0.1, 0.2)],
                                                      header="x,y")), *steps, *FAST)
    assert missing_time.exit_code == ExitCode.INPUT and "'ts'" in missing_time.stderr


def test_replacement_without_an_accepted_record_or_a_release_exits_1(tmp_path: Path) -> None:
    bad = _csv(tmp_path / "bad.csv", [(1, "abc", 0.2)] * 30)
    result = _invoke("run", "--input", str(bad), "--release-every", "10", *FAST,
                     "--out", str(tmp_path / "a"))
    assert result.exit_code == ExitCode.INPUT, result.output
    assert "none of the 30 records read was accepted" in result.stderr
    assert "30 × field 'x' must be a number" in " ".join(result.stderr.split())
    assert len((tmp_path / "a" / "dead-letter.ndjson").read_text().splitlines()) == 30
    few = _invoke("run", "--input", str(_csv(tmp_path / "few.csv", _rows(9))),
                  "--release-every", "10", *FAST, "--out", str(tmp_path / "b"))
    assert few.exit_code == ExitCode.INPUT and "fewer than --release-every" in few.stderr
    offline = _invoke("offline", "--input", str(bad), "--out", str(tmp_path / "s.csv"))
    assert offline.exit_code == ExitCode.INPUT and "no valid record" in offline.stderr


def test_add_remove_neighbours_give_the_same_exit_status_and_standard_output(
        tmp_path: Path) -> None:
    """D; D with one record more; D with one invalid record more; no valid record at all; no
    record at all: the status and stdout are the same, the counts differ on stderr only."""
    rows = _rows(60)
    inputs = {"D": rows, "D+x": [*rows, (12.5, 0.3, 0.7)], "D+bad": [*rows, (12.5, "n/a", 0.7)],
              "bad": [(r[0], "n/a", r[2]) for r in rows], "empty": []}
    seen = {}
    for i, (name, data) in enumerate(inputs.items()):
        (tmp_path / str(i)).mkdir()
        path = _csv(tmp_path / str(i) / "in.csv", data)
        result = _invoke("run", "--input", str(path), *ADD_REMOVE, *FAST, "--no-report",
                         "--out", str(tmp_path / "out"))
        stdout = result.stdout.replace(str(path), "INPUT")
        seen[name] = (result.exit_code, stdout, result.stderr)
        assert result.exit_code == 0, result.output
    assert len({(code, out) for code, out, _ in seen.values()}) == 1, seen
    assert "4 releases" in seen["D"][1] and "accepted" not in seen["D"][1]
    assert "60 read, 60 accepted" in seen["D"][2] and "61 read, 60 accepted" in seen["D+bad"][2]
    assert "NOT private" in seen["D"][2]
    for command in (("offline", "--mechanism", "pmm", "--neighbours", "add_remove",
                     "--out", str(tmp_path / "s.csv")),):
        codes = {_invoke(command[0], "--input", str(tmp_path / str(i) / "in.csv"),
                         *command[1:]).exit_code for i in range(len(inputs))}
        assert codes == {0}, command


def test_the_header_alone_as_schema_is_warned_about_loudly(tmp_path: Path) -> None:
    path = _csv(tmp_path / "ll.csv", [(40.7, -74.0)] * 20, header="lat,lon")
    result = _invoke("run", "--input", str(path), "--release-every", "10", *FAST,
                     "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert "WARNING: no --schema" in result.stderr and "WARNING: no --schema" not in result.stdout
    assert "clipped to the schema's bounds: 40 values (lat 20, lon 20)" in " ".join(
        result.stderr.split())


def test_a_reused_out_holds_only_the_new_runs_outputs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _invoke("run", "--points", "1000", "--release-every", "250", *FAST,
                    "--out", str(out))
    assert first.exit_code == 0 and (out / "summary.json").is_file()
    again = _invoke("run", "--points", "500", "--release-every", "250", *FAST, "--no-report",
                    "--out", str(out))
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in out.rglob("*") if p.is_file()) == [
        "dead-letter.ndjson", "release-000001.bin", "release-000002.bin", "schema.json"]
    (out / "notes.txt").write_text("mine")
    refused = _invoke("run", "--points", "500", "--out", str(out))
    assert refused.exit_code == ExitCode.USAGE and "notes.txt" in refused.stderr
    assert (out / "notes.txt").read_text() == "mine" and (out / "dead-letter.ndjson").is_file()
