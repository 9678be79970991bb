"""`python -m benchmarks topics` smoke run: a small recording through every step (real broker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.topics import format_report, run_topics_bench

pytestmark = pytest.mark.kafka


def test_topics_benchmark_runs_every_step(kafka_bootstrap: str, tmp_path: Path) -> None:
    report = run_topics_bench(kafka_bootstrap, records=3000, partitions=2, repeats=1,
                              work=tmp_path)
    assert set(report["medians"]) == {"baseline", "import", "export"}
    assert all(rate > 0 for rate in report["medians"].values())
    text = format_report(report)
    assert "dpsynth topics import" in text and "goal: import of 10^6 records" in text
