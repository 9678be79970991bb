"""``dpsynth produce``'s inputs: Gowalla records in a schema's names and units (issue 15)."""

from __future__ import annotations

import gzip
from pathlib import Path

import click
import numpy as np
import pytest

from dpsynth import datasets
from dpsynth.cli.produce import load_records
from dpsynth.schema import Schema

EXAMPLE_SCHEMA = Path(__file__).parents[2] / "schemas" / "example-schema.json"
#: (user, time, lat, lon, location): out of time order on purpose (the loader sorts).
ROWS = [(0, "2010-10-12T00:21:28Z", 40.6438845, -73.7828063, 1),
        (1, "2010-10-11T20:21:20Z", 40.7413742, -73.9881052, 2),
        (2, "2010-10-11T20:20:42Z", 40.9000000, -74.2000000, 3)]


@pytest.fixture
def fake_gowalla(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "gowalla_nyc"
    folder.mkdir()
    with gzip.open(folder / "gowalla_events.csv.gz", "wt") as f:
        for row in ROWS:
            f.write("\t".join(map(str, row)) + "\n")
    monkeypatch.setenv("DPSYNTH_DATA_DIR", str(tmp_path))
    return folder


def test_gowalla_with_the_example_schema_sends_lat_and_lon_in_degrees(fake_gowalla):
    schema = Schema.from_json_file(EXAMPLE_SCHEMA)
    records = load_records(None, "gowalla", None, 0, schema).records
    by_time = sorted(ROWS, key=lambda r: (r[1], r[0]))
    assert records == [{"lat": r[2], "lon": r[3]} for r in by_time]
    points, clips, rejects = schema.split_valid(records)
    assert not rejects and clips.total == 0
    lat = schema.columns[0]
    assert points[0, 0] == pytest.approx((by_time[0][2] - lat.lower) / (lat.upper - lat.lower))


def test_gowalla_without_a_schema_is_lon_lat_in_the_unit_square(fake_gowalla):
    records = load_records(None, "gowalla", None, 0, None).records
    first = min(ROWS, key=lambda r: (r[1], r[0]))
    assert records[0]["x"] == pytest.approx((first[3] + 74.2589) / 0.5585)
    assert records[0]["y"] == pytest.approx((first[2] - 40.4774) / 0.4402)


def test_gowalla_refuses_a_schema_whose_columns_are_not_coordinates(fake_gowalla, tmp_path):
    schema = Schema.from_dict({"version": 1, "columns": [
        {"name": "x", "lower": 0, "upper": 1}, {"name": "y", "lower": 0, "upper": 1}]})
    with pytest.raises(click.UsageError, match="neither a longitude nor a latitude"):
        load_records(None, "gowalla", None, 0, schema)


@pytest.mark.skipif(not datasets.gowalla_path().is_file(), reason="Gowalla not in DPSYNTH_DATA_DIR")
def test_real_gowalla_fits_the_example_schema():
    schema = Schema.from_json_file(EXAMPLE_SCHEMA)
    records = load_records(None, "gowalla", None, 0, schema).records
    points, clips, rejects = schema.split_valid(records[:50_000])
    assert not rejects
    assert clips.total < 0.01 * len(points)  # the schema's box is the data's (a few outliers)
    unit = datasets.load_gowalla()[:50_000]
    # same check-ins as dpsynth run's [0,1] stream, up to the two boxes' affine maps
    assert np.corrcoef(points[:, 1], unit[:, 0])[0, 1] > 0.999  # lon
    assert np.corrcoef(points[:, 0], unit[:, 1])[0, 1] > 0.999  # lat
