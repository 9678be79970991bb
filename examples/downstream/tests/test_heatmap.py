"""Our report runs on a realistic, privacy-safe stream: dpsynth's synthetic dataset.

The fixtures come with ``pip install "dpsynth[testing]"`` (dpsynth's pytest plugin): a Kafka
broker for the session, a fresh topic filled from a recording of a synthetic topic (the example
bundled with dpsynth unless ``--dpsynth-recording PATH`` or the ini option names our own), and
the merged synthetic dataset read from that topic through dpsynth's consumer library.
"""

from __future__ import annotations

import pytest

from heatmap import busiest_cells

pytestmark = pytest.mark.kafka


def test_busiest_cells_of_the_synthetic_dataset(dpsynth_recorded_topic,
                                                dpsynth_synthetic_dataset) -> None:
    data = dpsynth_synthetic_dataset
    assert dpsynth_recorded_topic.header.role == "synthetic"  # releases: ε-DP, shareable
    assert data.epsilon is not None and len(data) > 0
    schema = dpsynth_recorded_topic.header.record_schema  # the run's columns and bounds
    bounds = {c["name"]: (c["lower"], c["upper"]) for c in schema["columns"]}
    cells = busiest_cells(data.records(), columns=data.columns, bounds=bounds, grid=4, top=3)
    assert len(cells) == 3
    assert cells[0][1] >= cells[1][1] >= cells[2][1] > 0
    assert sum(n for _, n in cells) <= len(data)
