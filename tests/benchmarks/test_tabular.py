"""`python -m benchmarks tabular` smoke run on the shared Adult data (skipped when it is absent)."""

from __future__ import annotations

import csv

import pytest
from click.testing import CliRunner

from benchmarks.__main__ import main
from benchmarks.tabular import ADULT_DIR, PAPER
from dpsynth.datasets import load_adult, make_stream

needs_adult = pytest.mark.skipif(not (ADULT_DIR / "adult.csv").exists(),
                                 reason="shared Adult data absent")


@needs_adult
def test_adult_streams():
    domain, codes, csv_order = load_adult()
    assert codes.shape == (48813, 15) and len(domain.sizes) == 15
    ordered = make_stream(codes, csv_order, domain, "ordered", 0)
    age = domain.attributes.index("age")
    assert (ordered[1:, age] >= ordered[:-1, age]).all()
    a, b = (make_stream(codes, csv_order, domain, "randomized", s) for s in (0, 1))
    assert sorted(map(tuple, a.tolist())) == sorted(map(tuple, codes.tolist()))
    assert (a != b).any()


@needs_adult
def test_bench_smoke(tmp_path):
    result = CliRunner().invoke(main, [
        "tabular", "--datasets", "randomized-200", "--epsilons", "1",
        "--max-steps", "3", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((tmp_path / "results-run.csv").read_text().splitlines()))
    assert [r["method"] for r in rows] == ["baseline", "simple", "block"]
    assert all(0 < float(r["AvgWE"]) <= float(r["MaxWE"]) for r in rows)
    summary = (tmp_path / "summary.md").read_text()
    assert "| Adult-randomized-bs-200 | 1 | AvgWE | 0.0065 |" in summary
    assert all(0 <= float(r["AvgRelWE_L1"]) <= float(r["MaxRelWE_L1"]) for r in rows)
    assert "| Adult-randomized-bs-200 | 1 | AvgRelWE_L1 | 0.2786 |" in summary  # paper beside


@needs_adult
def test_speed_smoke():
    result = CliRunner().invoke(main, ["tabular-speed", "--steps", "3", "--repeats", "1"])
    assert result.exit_code == 0, result.output
    assert result.output.count("ratio") == 4 and "before" in result.output


def test_paper_numbers_cover_all_adult_cells():
    assert len(PAPER) == 16
    assert PAPER[("Adult-randomized-bs-50", 4.0)]["MaxWE"] == (0.0243, 0.0208, 0.0208)
