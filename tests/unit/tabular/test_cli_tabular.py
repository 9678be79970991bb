"""`dpsynth tabular run` on a small CSV + domain file; the domain JSON Schema."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from click.testing import CliRunner

from dpsynth.cli import main
from dpsynth.release import read_release_records
from dpsynth.tabular import Domain, decode_tabular_release
from dpsynth.tabular.metrics import relative_l1, workload_metrics
from dpsynth.tabular.workloads import Workloads

ROOT = Path(__file__).resolve().parents[3]
DOMAIN = {"version": 1, "name": "toy", "attributes": [
    {"name": "sex", "categories": ["F", "M"]}, {"name": "age", "size": 4},
    {"name": "inc", "categories": ["lo", "hi"]}]}


def test_domain_schema_accepts_to_dict_and_rejects_typos():
    schema = json.loads((ROOT / "schemas" / "domain.v1.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(Domain.from_dict(DOMAIN).to_dict(), schema)
    bad = {"version": 1, "attributes": [{"name": "a", "size": 2, "categories": ["x", "y"]}]}
    assert not jsonschema.Draft202012Validator(schema).is_valid(bad)


def _write_table(path: Path, rows: int, *, extra: int = 0) -> None:
    """``rows`` valid records (time ``ts`` = row // 50), ``extra`` more in the first step, and
    one invalid record."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["sex", "age", "inc", "ts"])
        for i in range(rows):
            writer.writerow(["FM"[i % 2], str(i % 4), "hi" if i % 4 > 1 else "lo", i // 50])
        for _ in range(extra):
            writer.writerow(["F", "3", "hi", 0])
        writer.writerow(["X", "1", "lo", 0])  # invalid: skipped with a reason


def _tabular_run(tmp_path, monkeypatch, name: str, *options: str, rows: int = 230,
                 extra: int = 0):
    monkeypatch.delenv("DPSYNTH_NOISE_KEY", raising=False)
    monkeypatch.delenv("DPSYNTH_NOISE_KEY_FILE", raising=False)
    (tmp_path / "domain.json").write_text(json.dumps(DOMAIN))
    _write_table(tmp_path / f"{name}.csv", rows, extra=extra)
    out = tmp_path / name
    result = CliRunner().invoke(main, [
        "tabular", "run", "--data", str(tmp_path / f"{name}.csv"), "--domain",
        str(tmp_path / "domain.json"), "--epsilon", "2", "--write-every", "2", "--out", str(out),
        *options])
    return result, out


TIME = ("--time-column", "ts", "--time-origin", "0", "--time-period", "1", "--time-end", "5")


def test_P11_add_remove_steps_are_declared_time_steps(tmp_path, monkeypatch):
    result, out = _tabular_run(tmp_path, monkeypatch, "d", *TIME)
    assert result.exit_code == 0, result.output
    assert "AvgWE=" in result.output
    rows = list(csv.DictReader((out / "errors.csv").read_text().splitlines()))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5]
    assert (out / "errors.png").stat().st_size > 0
    files = sorted(out.glob("release-*.tabular"))
    assert [f.name for f in files] == ["release-000002.tabular", "release-000004.tabular",
                                       "release-000005.tabular"]
    last = decode_tabular_release(read_release_records(files[-1]))
    # add/remove (default): the table has a noisy size, not the 230 records (P12)
    assert last.records.shape[1] == 3 and last.step == 5
    assert "records_seen" not in last.metadata
    synthetic = list(csv.DictReader((out / "synthetic-last.csv").read_text().splitlines()))
    assert len(synthetic) == last.records.shape[0] and set(synthetic[0]) == {"sex", "age", "inc"}
    # one record more (in the first step) moves no boundary and adds no step (issue 13)
    more, out_more = _tabular_run(tmp_path, monkeypatch, "d-plus-one", *TIME, extra=1)
    assert more.exit_code == 0, more.output
    assert sorted(f.name for f in out_more.glob("release-*.tabular")) == [f.name for f in files]


def test_P11_add_remove_without_public_time_is_refused(tmp_path, monkeypatch):
    result, out = _tabular_run(tmp_path, monkeypatch, "d", "--release-every", "50")
    assert result.exit_code == 2
    assert "--time-column" in result.output and "--neighbours replace" in result.output
    assert not out.exists()


def test_replace_steps_every_release_every_rows_without_reports(tmp_path, monkeypatch):
    result, out = _tabular_run(tmp_path, monkeypatch, "d", "--neighbours", "replace",
                               "--release-every", "50", "--no-report")
    assert result.exit_code == 0, result.output
    last = decode_tabular_release(read_release_records(out / "release-000005.tabular"))
    assert last.metadata["records_seen"] == 230 and last.records.shape == (230, 3)
    assert not (out / "errors.csv").exists() and not (out / "errors.png").exists()


def test_metrics_zero_for_identical_tables():
    w = Workloads((2, 3, 2))
    codes = np.array([[0, 1, 1], [1, 2, 0], [1, 2, 0]])
    assert workload_metrics(w, codes, codes) == {"AvgWE": 0.0, "MaxWE": 0.0, "AvgRelWE": 0.0,
                                                 "MaxRelWE": 0.0, "AvgRelWE_L1": 0.0,
                                                 "MaxRelWE_L1": 0.0}


def test_the_two_relwe_readings():
    """Per cell (mean over the non-empty true cells) and workload-level (‖W(f)−W(g)‖₁/‖W(f)‖₁ on
    raw counts): one rare cell overfilled is a large per-cell error but a small L1 one; with
    equal totals the L1 reading is |W| times WE."""
    w = Workloads((2, 2))
    f = np.array([[0, 0]] * 97 + [[0, 1], [1, 0], [1, 1]])  # cells 97, 1, 1, 1
    g = np.array([[0, 0]] * 91 + [[0, 1]] * 7 + [[1, 0], [1, 1]])  # cells 91, 7, 1, 1
    m = workload_metrics(w, f, g)
    assert m["AvgRelWE"] == pytest.approx((6 / 97 + 6 / 1 + 0 + 0) / 4)
    assert m["AvgRelWE_L1"] == pytest.approx(12 / 100)
    assert m["AvgRelWE_L1"] == pytest.approx(4 * m["AvgWE"])
    assert relative_l1([np.array([0.0, 0.0])], [np.array([1.0, 0.0])]).tolist() == [0.0]
