"""``python -m benchmarks points``: the cost of the materialised points (points_format arrow).

Layer: benchmark (pyarrow). For each t: the online synthesizer (the default mechanism, d
columns, ε = 1) fed the demo's drifting blobs up to t in 10 steps; its last release encoded
both ways with the worker's record limit (256 000 bytes) — the compact release records (leaf
counts, ``encode_release``) and the points records (``encode_points``, in the example schema's
units) — and reported as bytes per release, records per release, bytes lz4-compressed record
by record (what the worker's lz4 producer batches approach) and seconds to encode (medians of
``--repeats``; the points include materialising ``Release.points``), with the ratios
points / compact. Sizes are deterministic; the seconds are this machine's.

.. code-block:: console

    $ python -m benchmarks points --sizes 1000,10000,100000,1000000
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import click
import numpy as np

from benchmarks.noise import machine_info
from dpsynth.datasets import drifting_blobs
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import DEFAULT_MAX_CHUNK_BYTES, encode_release
from dpsynth.release.points_arrow import encode_points, pyarrow_module
from dpsynth.schema import Schema

SCHEMAS = {
    2: {"version": 1, "columns": [{"name": "lat", "lower": 40.5, "upper": 40.95},
                                  {"name": "lon", "lower": -74.3, "upper": -73.7}]},
    3: {"version": 1, "columns": [{"name": "lat", "lower": 40.5, "upper": 40.95},
                                  {"name": "lon", "lower": -74.3, "upper": -73.7},
                                  {"name": "hour", "lower": 0, "upper": 24}]},
}


def _median_seconds(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(t: int, d: int, repeats: int) -> dict[str, Any]:
    """One row of the table (see the module docstring)."""
    pa = pyarrow_module()
    data = drifting_blobs(t, 0)
    if d == 3:
        data = np.column_stack([data, np.linspace(0.0, 1.0, t)])
    synth = OnlineSynthesizer(d=d, epsilon=1.0, key=bytes(32), release_every=t // 10)
    release = synth.extend(data)[-1]
    schema = Schema.from_dict(SCHEMAS[d])
    compact = encode_release(release, run_id="bench", partition=0, sequence=release.sequence)
    points = encode_points(release, schema, run_id="bench", partition=0,
                           max_chunk_bytes=DEFAULT_MAX_CHUNK_BYTES)

    def lz4(records: list[bytes]) -> int:
        return sum(pa.compress(r, codec="lz4", asbytes=True).__len__() for r in records)

    row = {
        "t": release.t, "d": d, "depth": release.depth,
        "compact_bytes": sum(map(len, compact)), "compact_records": len(compact),
        "points_bytes": sum(map(len, points)), "points_records": len(points),
        "compact_lz4": lz4(compact), "points_lz4": lz4(points),
        "compact_s": _median_seconds(lambda: encode_release(
            release, run_id="bench", partition=0, sequence=release.sequence), repeats),
        "points_s": _median_seconds(lambda: encode_points(
            release, schema, run_id="bench", partition=0), repeats),
    }
    row["bytes_ratio"] = row["points_bytes"] / row["compact_bytes"]
    row["lz4_ratio"] = row["points_lz4"] / row["compact_lz4"]
    row["seconds_ratio"] = row["points_s"] / row["compact_s"]
    return row


@click.command()
@click.option("--sizes", default="1000,10000,100000,1000000", show_default=True,
              help="The t measured, comma-separated.")
@click.option("--dims", default="2,3", show_default=True, help="The d measured (2 and/or 3).")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True)
def bench_points(sizes: str, dims: str, repeats: int) -> None:
    """Bytes and seconds per release: materialised points against the compact release."""
    click.echo(f"machine: {machine_info()}")
    click.echo("| d | t | depth | compact bytes (records) | points bytes (records) | points / "
               "compact | lz4: compact → points (ratio) | encode s: compact → points (ratio) |")
    click.echo("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for d in (int(x) for x in dims.split(",")):
        for t in (int(x) for x in sizes.split(",")):
            r = measure(t, d, repeats)
            click.echo(
                f"| {d} | {r['t']:,} | {r['depth']} | {r['compact_bytes']:,} "
                f"({r['compact_records']}) | {r['points_bytes']:,} ({r['points_records']}) | "
                f"{r['bytes_ratio']:.1f}× | {r['compact_lz4']:,} → {r['points_lz4']:,} "
                f"({r['lz4_ratio']:.1f}×) | {r['compact_s']:.4f} → {r['points_s']:.3f} "
                f"({r['seconds_ratio']:.0f}×) |")
