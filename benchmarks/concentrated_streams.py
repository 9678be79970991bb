"""Concentrated streams (issue 31): most records in a tiny corner of the unit square.

Layer: adapter (workloads: seeded ``numpy.random`` is fine here, never privacy noise).

Every stream is a deterministic function of (n, its parameters) and lies in [0,1]^2 in time
order. Four families:

* ``city_in_country`` (real): Gowalla NYC check-ins (time order) inside the box of the
  contiguous United States. NYC covers 1.6·10⁻⁴ of the square (x ≈ 0.88, y ≈ 0.65).
* ``quakes_in_state`` (real): San Jacinto epicentres (QTM, 2008–2017, time order) inside the box
  of California: 0.9 % of the square; aftershock sequences are dwell periods.
* ``traveller`` (real positions, simulated sampling): a GPS-like track of three Gowalla users
  over months: one sample every fixed interval per user (the user's span over 40,000), the user
  dwelling at the last check-in (10 m jitter) until travelling in a straight line to the next
  one at 30 km/h, and 2 trips per user (3 % of the user's samples) during which the user's own
  pattern is moved 2–7° away (a far city); users merged in time order, in the bounding box of
  all their positions (home city ≈ 0.5 % of the square).
* ``multiscale`` (generated): a city (95 %): 12 neighbourhoods (σ 0.004 around a centre) of 8
  venues each (σ 0.0008), records at a venue ± 5·10⁻⁵ with Zipf(1.1) venue weights; 3–4 far
  clusters (4 %, σ 0.002); 0.3 % uniform background; the stream alternates roaming stretches
  (geometric, mean 600 records, drawn from the mixture) and dwell stretches (geometric, mean 400
  records, all at one venue ± 2·10⁻⁵), a dwell starting with probability 0.3.

The panel (:data:`TUNING`, :data:`HELD_OUT`): levers are tuned on the tuning streams only; the
report streams are held out (other users, other seeds, and the two real boxes).
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from datetime import datetime
from functools import lru_cache

import numpy as np

from dpsynth.datasets import data_dir, gowalla_path

#: The contiguous United States (lon, lat) and California: (lowest, width) in degrees.
CONUS_LON, CONUS_LAT = (-124.8, 57.9), (24.4, 25.0)
CALIFORNIA_LON, CALIFORNIA_LAT = (-124.5, 10.4), (32.5, 9.5)
#: Gowalla users by check-in count (heaviest first), split between tuning and held-out tracks.
TUNING_USERS = (578, 4985, 2798)
HELD_OUT_USERS = (22, 3480, 4929)
#: Samples per user of a traveller track, and the walking/driving speed between check-ins.
SAMPLES_PER_USER = 40_000
SPEED_DEG_PER_S = 30 / 3.6 / 111_000  # 30 km/h in degrees of latitude per second


def _box(lon: np.ndarray, lat: np.ndarray, lon_box: tuple[float, float],
         lat_box: tuple[float, float]) -> np.ndarray:
    x = (lon - lon_box[0]) / lon_box[1]
    y = (lat - lat_box[0]) / lat_box[1]
    return np.clip(np.stack([x, y], axis=1), 0.0, 1.0)


@lru_cache(maxsize=1)
def _gowalla_rows() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(unix seconds, user, lon, lat) of every check-in in time order (ties by user)."""
    import gzip

    rows = []
    with gzip.open(gowalla_path(), "rt") as handle:
        for user, ts, lat, lon, _ in csv.reader(handle, delimiter="\t"):
            rows.append((ts, int(user), float(lon), float(lat)))
    rows.sort(key=lambda r: (r[0], r[1]))
    seconds = np.array([datetime.fromisoformat(r[0].replace("Z", "+00:00")).timestamp()
                        for r in rows])
    return (seconds, np.array([r[1] for r in rows]), np.array([r[2] for r in rows]),
            np.array([r[3] for r in rows]))


def city_in_country(n: int) -> np.ndarray:
    """The first n Gowalla NYC check-ins in time order, inside the contiguous-US box."""
    _, _, lon, lat = _gowalla_rows()
    return _box(lon[:n], lat[:n], CONUS_LON, CONUS_LAT)


@lru_cache(maxsize=1)
def _quakes() -> tuple[np.ndarray, np.ndarray]:
    path = data_dir() / "earthquakes_sanjac_qtm" / "SanJac_catalog.csv"
    with path.open() as handle:
        rows = [(float(r["longitude"]), float(r["latitude"])) for r in csv.DictReader(handle)]
    arr = np.array(rows)
    return arr[:, 0], arr[:, 1]


def quakes_in_state(n: int) -> np.ndarray:
    """The first n San Jacinto epicentres (time order) inside the California box."""
    lon, lat = _quakes()
    return _box(lon[:n], lat[:n], CALIFORNIA_LON, CALIFORNIA_LAT)


def _track(seconds: np.ndarray, lon: np.ndarray, lat: np.ndarray, samples: int,
           rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(sample times, positions) of one user: dwell at a check-in, then travel to the next."""
    times = np.linspace(seconds[0], seconds[-1], samples)
    i = np.clip(np.searchsorted(seconds, times, side="right") - 1, 0, len(seconds) - 2)
    here = np.stack([lon[i], lat[i]], axis=1)
    there = np.stack([lon[i + 1], lat[i + 1]], axis=1)
    gap = np.maximum(seconds[i + 1] - seconds[i], 1.0)
    travel = np.minimum(np.linalg.norm(there - here, axis=1) / SPEED_DEG_PER_S, gap / 2)
    leave = seconds[i + 1] - travel
    moving = np.clip((times - leave) / np.maximum(travel, 1e-9), 0.0, 1.0)[:, None]
    position = here + moving * (there - here) + rng.normal(0.0, 1e-4, (samples, 2))
    return times, position


def traveller(n: int, users: tuple[int, ...] = TUNING_USERS, seed: int = 0) -> np.ndarray:
    """The first n samples of the users' merged GPS-like tracks (module docstring)."""
    return _traveller(users, seed)[:n]


@lru_cache(maxsize=4)
def _traveller(users: tuple[int, ...], seed: int) -> np.ndarray:
    seconds, who, lon, lat = _gowalla_rows()
    rng = np.random.default_rng([seed, *users])
    times, points = [], []
    for user in users:
        mine = who == user
        t, p = _track(seconds[mine], lon[mine], lat[mine], SAMPLES_PER_USER, rng)
        for _ in range(2):  # trips: the user's own pattern, 2–7° away, 1.5 % of samples each
            length = int(0.015 * SAMPLES_PER_USER)
            start = rng.integers(0, SAMPLES_PER_USER - length)
            angle, distance = rng.uniform(0, 2 * np.pi), rng.uniform(2.0, 7.0)
            p[start:start + length] += distance * np.array([np.cos(angle), np.sin(angle)])
        times.append(t)
        points.append(p)
    order = np.argsort(np.concatenate(times), kind="stable")
    xy = np.concatenate(points)[order]
    low, high = xy.min(axis=0), xy.max(axis=0)
    return np.clip((xy - low) / (high - low), 0.0, 1.0)


def multiscale(n: int, seed: int = 0) -> np.ndarray:
    """A city of neighbourhoods of venues, far clusters, background and dwell stretches."""
    rng = np.random.default_rng([31, seed])
    home = rng.uniform(0.1, 0.9, 2)
    hoods = home + rng.normal(0.0, 0.004, (12, 2))
    venues = (hoods[:, None, :] + rng.normal(0.0, 0.0008, (12, 8, 2))).reshape(-1, 2)
    weight = 1.0 / np.arange(1, venues.shape[0] + 1) ** 1.1
    weight = rng.permutation(weight / weight.sum())
    far = rng.uniform(0.0, 1.0, (int(rng.integers(3, 5)), 2))

    def roam(m: int) -> np.ndarray:
        kind = rng.choice(3, size=m, p=[0.957, 0.04, 0.003])
        out = venues[rng.choice(venues.shape[0], size=m, p=weight)]
        out = out + rng.normal(0.0, 5e-5, (m, 2))
        cluster = far[rng.integers(0, far.shape[0], m)] + rng.normal(0.0, 0.002, (m, 2))
        out[kind == 1] = cluster[kind == 1]
        out[kind == 2] = rng.random((int((kind == 2).sum()), 2))
        return out

    parts, total = [], 0
    while total < n:
        if rng.random() < 0.3:
            m = int(rng.geometric(1 / 400))
            venue = venues[rng.choice(venues.shape[0], p=weight)]
            part = venue + rng.normal(0.0, 2e-5, (m, 2))
        else:
            m = int(rng.geometric(1 / 600))
            part = roam(m)
        parts.append(part)
        total += m
    return np.clip(np.concatenate(parts)[:n], 0.0, 1.0)


#: Stream name → f(n): the panel. Tuning streams tune levers; held-out streams report them.
TUNING: dict[str, Callable[[int], np.ndarray]] = {
    "multiscale-0": lambda n: multiscale(n, 0),
    "multiscale-1": lambda n: multiscale(n, 1),
    "traveller-A": lambda n: traveller(n, TUNING_USERS),
}
HELD_OUT: dict[str, Callable[[int], np.ndarray]] = {
    "city_in_country": city_in_country,
    "quakes_in_state": quakes_in_state,
    "traveller-B": lambda n: traveller(n, HELD_OUT_USERS),
    "multiscale-100": lambda n: multiscale(n, 100),
}
PANEL = {**TUNING, **HELD_OUT}


def occupancy(x: np.ndarray, depth: int = 10) -> float:
    """The share of the square's depth-``depth`` cells (2^depth of them) holding a record."""
    from dpsynth.tree import route

    return float(np.unique(route(x, depth=depth)).size / (1 << depth))


def area_holding(x: np.ndarray, share: float = 0.95, depth: int = 16) -> float:
    """The smallest share of the square's area (in depth-``depth`` cells) holding ``share`` of
    the records: how concentrated a stream is."""
    from dpsynth.tree import route

    _, counts = np.unique(route(x, depth=depth), return_counts=True)
    counts = np.sort(counts)[::-1]
    cells = int(np.searchsorted(np.cumsum(counts), share * x.shape[0])) + 1
    return cells / float(1 << depth)
