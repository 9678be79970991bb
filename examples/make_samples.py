"""Write the sample inputs of examples/ (generated here, never copied from a real data set).

    $ python examples/make_samples.py          # rewrites the files below, byte for byte

- ``points.csv`` + ``points.schema.json``: 2,000 points (lat, lon) around three centres in
  New York, with the schema's bounds (the README's first ``dpsynth run --input``);
- ``checkins.csv`` + ``checkins.schema.json``: 3,000 check-ins of 150 users (a ``user`` column,
  a heavy-tailed number of check-ins each) over the first week of January 2026 (an ISO 8601
  ``ts`` column): the privacy unit "user" and steps of public time;
- ``adult.csv`` + ``adult.domain.json``: 2,400 rows of six categorical attributes in the
  manner of the Adult census table (``dpsynth tabular run``).

The generator is a fixed-seed NumPy stream: public, synthetic workloads, not privacy noise.
``tests/unit/test_readme_commands.py`` checks that these files are what this script writes.
"""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
POINTS_SCHEMA = {"version": 1, "name": "nyc-points", "columns": [
    {"name": "lat", "lower": 40.5, "upper": 40.95},
    {"name": "lon", "lower": -74.3, "upper": -73.7}]}
CHECKINS_SCHEMA = {"version": 1, "name": "checkins", "user_column": "user", "columns": [
    {"name": "lat", "lower": 40.5, "upper": 40.95},
    {"name": "lon", "lower": -74.3, "upper": -73.7}]}
ADULT_DOMAIN = {"version": 1, "name": "adult-like", "attributes": [
    {"name": "age", "categories": ["17-24", "25-34", "35-44", "45-54", "55-64", "65+"]},
    {"name": "education", "categories": ["school", "high-school", "college", "bachelors",
                                         "masters", "doctorate"]},
    {"name": "marital", "categories": ["never-married", "married", "divorced", "widowed"]},
    {"name": "hours", "categories": ["<20", "20-39", "40", "41-60", ">60"]},
    {"name": "sex", "categories": ["female", "male"]},
    {"name": "income", "categories": ["<=50K", ">50K"]}]}
CENTRES = np.array([[40.758, -73.985], [40.706, -74.009], [40.678, -73.944]])  # lat, lon
WEEK_START = datetime(2026, 1, 1, tzinfo=UTC)


def _nyc_points(rng: np.random.Generator, n: int) -> np.ndarray:
    """n points (lat, lon) around CENTRES, inside POINTS_SCHEMA's bounds."""
    centre = CENTRES[rng.choice(len(CENTRES), size=n, p=[0.5, 0.3, 0.2])]
    points = centre + rng.normal(scale=[0.02, 0.025], size=(n, 2))
    return np.clip(points, [40.5, -74.3], [40.95, -73.7])


def _write_csv(path: Path, header: list[str], rows: list[list[object]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def points(rng: np.random.Generator) -> None:
    xy = _nyc_points(rng, 2000)
    _write_csv(HERE / "points.csv", ["lat", "lon"],
               [[f"{a:.5f}", f"{b:.5f}"] for a, b in xy.tolist()])
    (HERE / "points.schema.json").write_text(json.dumps(POINTS_SCHEMA, indent=1) + "\n")


def checkins(rng: np.random.Generator) -> None:
    n, users = 3000, 150
    weights = 1.0 / np.arange(1, users + 1) ** 0.8  # a few heavy users, many light ones
    user = rng.choice(users, size=n, p=weights / weights.sum())
    seconds = np.sort(rng.uniform(0, 7 * 86400, size=n))
    xy = _nyc_points(rng, n)
    rows = [[f"u{u:03d}", (WEEK_START + timedelta(seconds=int(s))).strftime("%Y-%m-%dT%H:%M:%S"),
             f"{a:.5f}", f"{b:.5f}"] for u, s, (a, b) in zip(user.tolist(), seconds.tolist(),
                                                             xy.tolist(), strict=True)]
    _write_csv(HERE / "checkins.csv", ["user", "ts", "lat", "lon"], rows)
    (HERE / "checkins.schema.json").write_text(json.dumps(CHECKINS_SCHEMA, indent=1) + "\n")


def adult(rng: np.random.Generator) -> None:
    n = 2400
    attrs = {a["name"]: a["categories"] for a in ADULT_DOMAIN["attributes"]}
    age = rng.choice(6, size=n, p=[0.14, 0.25, 0.24, 0.19, 0.12, 0.06])
    education = np.clip(rng.binomial(5, 0.35 + 0.03 * np.minimum(age, 3)), 0, 5)
    marital = np.where(age == 0, rng.choice(4, size=n, p=[0.85, 0.12, 0.03, 0.0]),
                       rng.choice(4, size=n, p=[0.25, 0.55, 0.15, 0.05]))
    hours = np.clip(rng.binomial(4, 0.45 + 0.05 * (age > 0)), 0, 4)
    sex = rng.choice(2, size=n, p=[0.33, 0.67])
    rich = 0.05 + 0.08 * education + 0.05 * (marital == 1) + 0.05 * (hours >= 3)
    income = (rng.random(n) < rich).astype(int)
    columns = {"age": age, "education": education, "marital": marital, "hours": hours,
               "sex": sex, "income": income}
    rows = [[attrs[name][int(columns[name][i])] for name in attrs] for i in range(n)]
    _write_csv(HERE / "adult.csv", list(attrs), rows)
    (HERE / "adult.domain.json").write_text(json.dumps(ADULT_DOMAIN, indent=1) + "\n")


def main() -> None:
    rng = np.random.default_rng(20260101)
    points(rng)
    checkins(rng)
    adult(rng)


if __name__ == "__main__":
    main()
