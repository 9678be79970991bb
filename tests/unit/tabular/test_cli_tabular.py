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


def test_run_writes_releases_errors_and_plot(tmp_path, monkeypatch):
    monkeypatch.delenv("DPSYNTH_NOISE_KEY", raising=False)
    monkeypatch.delenv("DPSYNTH_NOISE_KEY_FILE", raising=False)
    (tmp_path / "domain.json").write_text(json.dumps(DOMAIN))
    with open(tmp_path / "data.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["sex", "age", "inc"])
        for i in range(230):
            writer.writerow(["FM"[i % 2], str(i % 4), "hi" if i % 4 > 1 else "lo"])
        writer.writerow(["X", "1", "lo"])  # invalid: skipped with a reason
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [
        "tabular", "run", "--data", str(tmp_path / "data.csv"), "--domain",
        str(tmp_path / "domain.json"), "--release-every", "50", "--epsilon", "2",
        "--write-every", "2", "--out", str(out)])
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
