"""Prometheus text exposition of the worker's metrics."""

from __future__ import annotations

import pytest

from dpsynth.stream.crash import CrashPoints
from dpsynth.stream.metrics import METRICS, Metrics


def test_counters_gauges_and_histograms_render_in_the_text_format():
    m = Metrics()
    m.inc("records_in", 0, 1000)
    m.inc("records_in", 1, 5)
    m.set("t", 0, 1000)
    m.observe("release_latency_seconds", 0, 0.03)
    m.observe("release_latency_seconds", 0, 3.0)
    text = m.render()
    assert "# TYPE dpsynth_records_in_total counter" in text
    assert 'dpsynth_records_in_total{partition="0"} 1000.0' in text
    assert 'dpsynth_records_in_total{partition="1"} 5.0' in text
    assert "# TYPE dpsynth_t gauge" in text and 'dpsynth_t{partition="0"} 1000.0' in text
    assert 'dpsynth_release_latency_seconds_bucket{le="0.05",partition="0"} 1.0' in text
    assert 'dpsynth_release_latency_seconds_bucket{le="+Inf",partition="0"} 2.0' in text
    assert 'dpsynth_release_latency_seconds_sum{partition="0"} 3.03' in text
    assert 'dpsynth_release_latency_seconds_count{partition="0"} 2.0' in text
    assert "_created" not in text
    assert text.endswith("\n")
    for name, (kind, _) in METRICS.items():
        assert f"# TYPE dpsynth_{name}{'_total' if kind == 'counter' else ''} {kind}" in text


def test_a_revoked_partition_leaves_no_series_behind():
    m = Metrics()
    for p in (0, 1):
        m.inc("records_in", p, 10)
        m.set("t", p, 10)
        m.observe("release_latency_seconds", p, 0.1)
    m.remove_partition(0)
    text = m.render()
    assert 'partition="0"' not in text and 'dpsynth_t{partition="1"} 10.0' in text
    assert m.get("records_in", 0) == 0 and m.get("records_in", 1) == 10
    m.remove_partition(7)  # never seen: nothing to do


def test_undeclared_or_mistyped_metrics_are_refused():
    m = Metrics()
    with pytest.raises(KeyError):
        m.inc("t", 0)  # a gauge
    with pytest.raises(KeyError):
        m.set("nonexistent", 0, 1)


def test_crash_points_fire_at_the_configured_visit_only():
    fired = []
    points = CrashPoints(("after_release_produced", 2), action=fired.append)
    for _ in range(3):
        points.reached("mid_tick")
        points.reached("after_release_produced")
    assert fired == ["after_release_produced"]
    assert points.armed("after_release_produced") and not points.armed("mid_tick")
