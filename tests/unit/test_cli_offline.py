"""``dpsynth offline``: offline PMM / PSMM / lowdim files in original units, metadata, release."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpsynth.cli import KEY_ENV, KEY_FILE_ENV, main
from dpsynth.keybinding import STATE_DIR_ENV
from dpsynth.offline.pmm import pmm_synthesize
from dpsynth.offline.psmm import psmm_synthesize
from dpsynth.release import read_release_file
from dpsynth.schema import Schema

SECRET_HEX = "5e" * 16 + "c4" * 16
SCHEMA = {"version": 1, "columns": [{"name": "lat", "lower": 40.5, "upper": 40.95},
                                    {"name": "lon", "lower": -74.3, "upper": -73.7},
                                    {"name": "alt", "lower": 0.0, "upper": 100.0}]}


@pytest.fixture
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv(KEY_ENV, SECRET_HEX)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    rng = np.random.default_rng(0)
    t = rng.beta(2, 3, 600)
    with open(tmp_path / "in.csv", "w") as f:
        f.write("lat,lon,alt,note\n")
        for a in t:
            f.write(f"{40.5 + 0.45 * a},{-74.3 + 0.6 * (1 - a)},{30 + 20 * a},x\n")
        f.write("not-a-number,-74.0,10,x\n")  # rejected by the schema
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    return tmp_path / "in.csv", schema


def _offline(inputs: tuple[Path, Path], out: Path, *args: str) -> str:
    data, schema = inputs
    result = CliRunner().invoke(main, ["offline", "--input", str(data), "--schema", str(schema),
                                       "--out", str(out), *args])
    assert result.exit_code == 0, result.output
    return result.output


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("method", ["pmm", "psmm", "lowdim"])
def test_offline_writes_records_in_units_and_metadata(
    inputs: tuple[Path, Path], tmp_path: Path, method: str
) -> None:
    out = tmp_path / f"{method}.csv"
    output = _offline(inputs, out, "--mechanism", method, "--epsilon", "2")
    rows = _read_csv(out)
    assert list(rows[0]) == ["lat", "lon", "alt"]
    values = np.array([[float(r[c]) for c in ("lat", "lon", "alt")] for r in rows])
    assert (values >= [40.5, -74.3, 0]).all() and (values <= [40.95, -73.7, 100]).all()
    meta = json.loads(out.with_name(out.name + ".meta.json").read_text())
    assert meta["method"] == method and meta["epsilon"] == 2.0
    assert meta["neighbours"] == "replace" and meta["records_in"] == 600
    assert meta["n_out"] == len(rows)
    assert len(meta["key_fingerprint"]) == 16
    for path in tmp_path.iterdir():
        assert SECRET_HEX not in path.read_bytes().hex() or path.name == "in.csv"
        assert SECRET_HEX.encode() not in path.read_bytes()
    assert SECRET_HEX not in output
    if method == "lowdim":
        assert meta["budget_split"]["covariance"] == pytest.approx(2 / 3)
        assert not out.with_name(out.name + ".release.bin").exists()
    else:
        release = read_release_file(out.with_name(out.name + ".release.bin"))
        assert release.t == len(rows) and release.metadata["method"] == method
        assert release.metadata["key_fingerprint"] == meta["key_fingerprint"]
        assert release.metadata["neighbours"] == "replace"
        units = Schema.from_dict(SCHEMA).from_unit(release.points)
        assert np.allclose(units, values)


def test_same_key_gives_identical_files(inputs: tuple[Path, Path], tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for method in ("pmm", "psmm", "lowdim"):  # one key per method (P13): a state dir each
        monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path / f"state-{method}"))
        a, b = tmp_path / f"a-{method}.ndjson", tmp_path / f"b-{method}.ndjson"
        _offline(inputs, a, "--mechanism", method)
        _offline(inputs, b, "--mechanism", method)
        assert a.read_bytes() == b.read_bytes()
        first = json.loads(a.read_text().splitlines()[0])
        assert set(first) == {"lat", "lon", "alt"}


def test_add_remove_hides_n_and_lowdim_refuses_it(
    inputs: tuple[Path, Path], tmp_path: Path
) -> None:
    out = tmp_path / "psmm.csv"
    _offline(inputs, out, "--mechanism", "psmm", "--neighbours", "add_remove")
    meta = json.loads(out.with_name(out.name + ".meta.json").read_text())
    assert meta["neighbours"] == "add_remove" and "records_in" not in meta
    data, schema = inputs
    result = CliRunner().invoke(main, ["offline", "--input", str(data), "--schema", str(schema),
                                       "--out", str(tmp_path / "x.csv"), "--mechanism", "lowdim",
                                       "--neighbours", "add_remove"])
    assert result.exit_code != 0 and "replace" in result.output


def test_bad_suffix_is_refused(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    data, schema = inputs
    result = CliRunner().invoke(main, ["offline", "--input", str(data), "--schema", str(schema),
                                       "--out", str(tmp_path / "x.parquet")])
    assert result.exit_code != 0 and ".csv" in result.output


@pytest.mark.parametrize(("method", "fn"), [("pmm", pmm_synthesize), ("psmm", psmm_synthesize)])
def test_snapshot_equals_the_library_call(
    inputs: tuple[Path, Path], tmp_path: Path, method: str, fn: object
) -> None:
    """The command is the library mechanism with the same key: no other noise is drawn."""
    data, _ = inputs
    out = tmp_path / f"{method}.csv"
    _offline(inputs, out, "--mechanism", method)
    schema = Schema.from_dict(SCHEMA)
    records = [r for r in _read_csv(data) if r["lat"] != "not-a-number"]
    x = schema.to_unit([{k: float(r[k]) for k in schema.names} for r in records])[0]
    expected = schema.from_unit(fn(x, 1.0, bytes.fromhex(SECRET_HEX), neighbours="replace"))
    got = np.array([[float(r[c]) for c in schema.names] for r in _read_csv(out)])
    assert got.shape == expected.shape and np.allclose(got, expected, rtol=0, atol=1e-9)
