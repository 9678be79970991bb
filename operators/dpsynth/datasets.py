"""Public streams for demos, examples and tests: generated workloads and real-data loaders.

Layer: adapter. Nothing here is privacy noise: the generators use ``numpy.random`` seeded by the
caller (public workloads), and the loaders read data sets that stay outside the repository
(``DPSYNTH_DATA_DIR``, default ``../shared/data`` next to the working directory's project).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import os
from pathlib import Path

import numpy as np

from dpsynth.errors import ConfigError
from dpsynth.tabular.domain import Domain

#: Environment variable naming the folder of the real data sets (gowalla_nyc/, adult_*/, …).
DATA_DIR_ENV = "DPSYNTH_DATA_DIR"


def data_dir() -> Path:
    """``DPSYNTH_DATA_DIR``, else the first ``shared/data`` beside the current directory or one
    of its parents (the workspace layout ``<workspace>/shared/data`` next to the project)."""
    if os.environ.get(DATA_DIR_ENV):
        return Path(os.environ[DATA_DIR_ENV])
    for folder in Path.cwd().resolve().parents:
        if (folder / "shared" / "data").is_dir():
            return folder / "shared" / "data"
    return Path.cwd().parent / "shared" / "data"


def adult_dir() -> Path:
    """The folder of Adult as paper 003 used it: ``<data dir>/adult_liu_iterative_dp``."""
    return data_dir() / "adult_liu_iterative_dp"


def gowalla_path() -> Path:
    """Where :func:`load_gowalla` reads from: ``<data dir>/gowalla_nyc/gowalla_events.csv.gz``."""
    return data_dir() / "gowalla_nyc" / "gowalla_events.csv.gz"


#: Gowalla NYC's filter box (its README): (lowest value, width) in degrees.
GOWALLA_LON = (-74.2589, 0.5585)
GOWALLA_LAT = (40.4774, 0.4402)


def _gowalla_rows(path: Path | None) -> list[tuple[str, int, float, float]]:
    """(time, user, lon, lat) of every check-in, in time order (stable: ties by user)."""
    rows = []
    path = gowalla_path() if path is None else path
    with gzip.open(path, "rt") as handle:
        for user, ts, lat, lon, _ in csv.reader(handle, delimiter="\t"):
            rows.append((ts, int(user), float(lon), float(lat)))
    rows.sort(key=lambda r: (r[0], r[1]))
    return rows


def load_gowalla_degrees(path: Path | None = None) -> np.ndarray:
    """Gowalla NYC check-ins in time order (stable sort by time, then user) as (lon, lat) in
    degrees, unclipped. ``path`` defaults to :func:`gowalla_path`."""
    return np.array([(r[2], r[3]) for r in _gowalla_rows(path)]).reshape(-1, 2)


def _gowalla_unit(xy: np.ndarray) -> np.ndarray:
    x = (xy[:, 0] - GOWALLA_LON[0]) / GOWALLA_LON[1]
    y = (xy[:, 1] - GOWALLA_LAT[0]) / GOWALLA_LAT[1]
    return np.clip(np.stack([x, y], axis=1), 0.0, 1.0)


def load_gowalla(path: Path | None = None) -> np.ndarray:
    """Gowalla NYC check-ins in time order (stable sort by time, then user), mapped to [0,1]^2.

    The box is the dataset's own filter box (its README): x = lon, y = lat. ``path`` defaults
    to :func:`gowalla_path`.
    """
    return _gowalla_unit(load_gowalla_degrees(path))


def load_gowalla_users(path: Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`load_gowalla` and the user of every check-in (int64, the file's first column):
    7,115 users, median 5 check-ins each, the heaviest 1,794 (the privacy unit "user")."""
    rows = _gowalla_rows(path)
    xy = np.array([(r[2], r[3]) for r in rows]).reshape(-1, 2)
    return _gowalla_unit(xy), np.array([r[1] for r in rows], np.int64)


def demo_users(n: int, seed: int = 0, *, n_users: int | None = None) -> np.ndarray:
    """A user id for each of ``n`` generated records: ``n_users`` users (default n/20, about
    Gowalla's 20 records per user) whose activity falls like rank^-0.8, so a few users hold
    many records and most hold a handful, as in check-in data. A public workload, like the
    points it labels (depends on n, seed and n_users only).

    >>> users = demo_users(20_000, seed=1)
    >>> counts = np.bincount(users)
    >>> users.shape, counts.size, int(counts.max()) > 500, int(np.median(counts)) < 20
    ((20000,), 1000, True, True)
    """
    n_users = max(n // 20, 1) if n_users is None else n_users
    rng = np.random.default_rng([seed, 16])  # a stream of its own: the points stay unchanged
    activity = np.arange(1, n_users + 1, dtype=np.float64) ** -0.8
    return rng.choice(n_users, size=n, p=activity / activity.sum())


def uniform_stream(n: int, d: int, seed: int) -> np.ndarray:
    """n i.i.d. uniform points in [0,1]^d."""
    return np.random.default_rng(seed).random((n, d))


def drifting_blobs(n: int, seed: int = 0, *, d: int = 2, blobs: int = 4) -> np.ndarray:
    """The generated stream of ``dpsynth run``: Gaussian blobs drifting slowly over time.

    Each of ``blobs`` blobs has a random weight, width (0.03–0.07) and start centre in
    [0.2, 0.8]^d; its centre moves in a straight line by 0.2 over the whole stream, so record i
    comes from the mixture at stream position i/n. A tenth of the records are uniform
    background. The result is clipped to [0,1]^d and depends only on (n, seed, d, blobs).

    >>> x = drifting_blobs(1000, seed=1)
    >>> x.shape, bool(((x >= 0) & (x <= 1)).all())
    ((1000, 2), True)
    """
    rng = np.random.default_rng(seed)
    start = rng.uniform(0.2, 0.8, size=(blobs, d))
    heading = rng.standard_normal((blobs, d))
    shift = 0.2 * heading / np.linalg.norm(heading, axis=1, keepdims=True)
    width = rng.uniform(0.03, 0.07, size=blobs)
    weight = rng.dirichlet(np.full(blobs, 3.0))
    blob = rng.choice(blobs, size=n, p=weight)
    position = (np.arange(n) / max(n, 1))[:, None]
    x = start[blob] + position * shift[blob] + rng.standard_normal((n, d)) * width[blob, None]
    background = rng.random(n) < 0.1
    x[background] = rng.random((int(background.sum()), d))
    return np.clip(x, 0.0, 1.0)


def moving_blob(n: int, seed: int = 0, *, d: int = 2, width: float = 0.05) -> np.ndarray:
    """A Gaussian blob (σ = ``width``) whose centre moves along x from 0.2 to 0.8 over the
    stream, the other coordinates at 0.5 (issue 14's drifting stream). Clipped to [0,1]^d."""
    rng = np.random.default_rng(seed)
    centre = np.full((n, d), 0.5)
    centre[:, 0] = np.linspace(0.2, 0.8, n)
    return np.clip(centre + rng.normal(0.0, width, (n, d)), 0.0, 1.0)


def rotating_ring(n: int, seed: int = 0, *, d: int = 2) -> np.ndarray:
    """A blob travelling once round a ring of radius 0.3 (angle 2πi/n ± 0.3 rad): its mean
    circles the centre. d = 1 keeps the x coordinate (a swing); d > 2 adds N(0.5, 0.05)s."""
    rng = np.random.default_rng(seed)
    angle = 2 * np.pi * np.arange(n) / max(n, 1) + rng.normal(0.0, 0.3, n)
    radius = 0.3 + rng.normal(0.0, 0.02, n)
    ring = 0.5 + radius[:, None] * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    extra = rng.normal(0.5, 0.05, (n, max(d - 2, 0)))
    return np.clip(np.concatenate([ring, extra], axis=1)[:, :d], 0.0, 1.0)


def regime_switch(n: int, seed: int = 0, *, d: int = 2) -> np.ndarray:
    """Two regimes: the first half around (0.25, …), the second around (0.75, …) (σ = 0.07),
    with a tenth of uniform background throughout — an abrupt change of distribution."""
    rng = np.random.default_rng(seed)
    centre = np.where(np.arange(n) < n // 2, 0.25, 0.75)[:, None]
    x = centre + rng.normal(0.0, 0.07, (n, d))
    background = rng.random(n) < 0.1
    x[background] = rng.random((int(background.sum()), d))
    return np.clip(x, 0.0, 1.0)


def gowalla_prefix(n: int, seed: int = 0, *, d: int = 2) -> np.ndarray:
    """The first ``n`` Gowalla check-ins in time order (:func:`load_gowalla`); d = 1 keeps the
    longitude. ``seed`` is unused (the data are fixed)."""
    if d > 2:
        raise ConfigError(f"Gowalla has 2 coordinates; d = {d} is not available")
    return load_gowalla()[:n, :d]


#: Generated streams by name, ``f(n, seed, d=...)``: stationary (uniform) and drifting ones.
STREAMS = {
    "uniform": lambda n, seed=0, *, d=2: uniform_stream(n, d, seed),
    "moving_blob": moving_blob,
    "rotating_ring": rotating_ring,
    "regime_switch": regime_switch,
    "drifting_blobs": drifting_blobs,
    "gowalla": gowalla_prefix,
}


def morton_decode(cells: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of Z-order cell ids of ``bits`` bits: bit 2i is bit i of x, bit 2i+1 of y."""
    cells = np.asarray(cells, dtype=np.int64)
    x = np.zeros_like(cells)
    y = np.zeros_like(cells)
    for i in range(bits):
        target = x if i % 2 == 0 else y
        target |= ((cells >> i) & 1) << (i // 2)
    return x, y


class DemoStream:
    """Records falling into the cells of one tree level, Gaussian-blob popularity on a 2-D grid.

    Parameters
    ----------
    bits
        The level has 2^bits cells, Z-order ids on a 2^⌈bits/2⌉ × 2^⌊bits/2⌋ grid.
    seed
        Seed of the workload (blob placement and the records), not of any privacy noise.

    Examples
    --------
    >>> stream = DemoStream(bits=6, seed=1)
    >>> cells, counts = stream.tick(100)
    >>> int(counts.sum()), bool((np.diff(cells) > 0).all())
    (100, True)
    """

    def __init__(self, bits: int, seed: int, *, blobs: int = 3, floor: float = 0.05) -> None:
        if bits < 2:
            raise ConfigError(f"bits ({bits}) must be >= 2 for a 2-D grid")
        self.bits = bits
        self.n_cells = 1 << bits
        self.rng = np.random.default_rng(seed)
        self.x, self.y = morton_decode(np.arange(self.n_cells), bits)
        self.shape = (1 << (bits // 2), 1 << ((bits + 1) // 2))  # (rows = y, columns = x)
        u = (self.x + 0.5) / self.shape[1]
        v = (self.y + 0.5) / self.shape[0]
        density = np.full(self.n_cells, floor)
        for _ in range(blobs):
            cu, cv = self.rng.uniform(0.15, 0.85, size=2)
            width = self.rng.uniform(0.04, 0.15)
            weight = self.rng.uniform(0.5, 1.5)
            density += weight * np.exp(-((u - cu) ** 2 + (v - cv) ** 2) / (2 * width**2))
        self.popularity = density / density.sum()

    def tick(self, n_records: int) -> tuple[np.ndarray, np.ndarray]:
        """Sorted unique cells and their record counts for one tick of ``n_records`` records."""
        records = self.rng.choice(self.n_cells, size=n_records, p=self.popularity)
        return np.unique(records, return_counts=True)

    def grid(self, values: np.ndarray) -> np.ndarray:
        """Per-cell ``values`` laid out on the 2-D grid (row = y, column = x)."""
        out = np.zeros(self.shape, dtype=np.asarray(values).dtype)
        out[self.y, self.x] = values
        return out


def load_adult(data_dir: Path | None = None) -> tuple[Domain, np.ndarray, list[str]]:
    """Adult (Liu et al.'s processed copy, paper 003's source; default :func:`adult_dir`): the
    domain (domain-file order), the codes in that order, and the CSV column order."""
    data_dir = adult_dir() if data_dir is None else data_dir
    domain = Domain.from_json_file(data_dir / "adult-domain.json")
    with open(data_dir / "adult.csv", newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader)[1:]  # the first column is the original row index
        raw = np.array([[int(v) for v in row[1:]] for row in reader], dtype=np.int64)
    order = [header.index(name) for name in domain.attributes]
    return domain, domain.check_codes(raw[:, order]), header


def make_stream(codes: np.ndarray, csv_order: list[str], domain: Domain, kind: str,
                seed: int) -> np.ndarray:
    """``randomized`` (keyed permutation) or ``ordered`` (lexicographic, CSV column order)."""
    if kind == "ordered":
        cols = [domain.attributes.index(name) for name in csv_order]
        return codes[np.lexsort([codes[:, c] for c in reversed(cols)])]
    keys = [int.from_bytes(hashlib.sha256(f"{seed}:{i}".encode()).digest()[:8], "big")
            for i in range(codes.shape[0])]
    return codes[np.argsort(np.array(keys, dtype=np.uint64), kind="stable")]
