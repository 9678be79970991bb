"""``python -m benchmarks release-size``: what a release costs on the topics, by leaves.

Layer: benchmark (no broker). The worker's synthesizer with its defaults (ε = 1, a release every
1000 records, depth 20, ``auto``) on Gowalla NYC as the worker gets it (``DPSYNTH_DATA_DIR``;
uniform points without it), the example schema; at t = 10³ … 10⁶ the release is encoded as the
worker publishes it (``DPSYNTH_RELEASE_MAX_RECORD_BYTES`` 256 000) and measured: occupied leaves
(the non-zero consistent leaf counts the format carries), records, bytes of header, chunks and
end record, and bytes per leaf. The fit ``bytes ≈ a + b·leaves`` over the rows is printed, with
the history a release every 1000 records makes up to t (Σ of the releases), which is what
retention must hold (docs/operator.md "Sizing the history").

.. code-block:: console

    $ DPSYNTH_DATA_DIR=/path/to/shared/data python -m benchmarks release-size
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import numpy as np

CHECKPOINTS = (1_000, 10_000, 100_000, 1_000_000)
RELEASE_EVERY = 1000
SCHEMA_FILE = Path(__file__).resolve().parents[1] / "schemas" / "example-schema.json"


def _points(n: int) -> tuple[np.ndarray, str]:
    from dpsynth import datasets
    from dpsynth.schema import Schema

    if datasets.gowalla_path().is_file():
        from benchmarks.kafka import gowalla_records

        schema = Schema.from_json_file(SCHEMA_FILE)
        points, _, _ = schema.split_valid(gowalla_records(n))
        return points, "Gowalla NYC (lat, lon), repeated in time order"
    return np.random.default_rng(1).random((n, 2)), "uniform in [0,1]^2 (no DPSYNTH_DATA_DIR)"


def release_sizes(n: int = CHECKPOINTS[-1]) -> dict[str, Any]:
    """Sizes of the worker's releases at the checkpoints up to ``n`` records."""
    from dpsynth.release import encode_release
    from dpsynth.settings import SynthesisSettings

    points, data = _points(n)
    synth = SynthesisSettings(epsilon=1.0).synthesizer(2, bytes(range(32)))
    rows, history_bytes, history_records = [], 0, 0
    for first in range(0, n, RELEASE_EVERY):
        for release in synth.extend(points[first:first + RELEASE_EVERY]):
            records = encode_release(release, run_id="run-0123456789abcdef", partition=0,
                                     sequence=int(release.metadata["sequence"]))
            history_bytes += sum(map(len, records))
            history_records += len(records)
            if release.t in CHECKPOINTS:
                leaves = int(np.count_nonzero(release.leaf_counts))
                rows.append({
                    "t": release.t, "leaves": leaves, "records": len(records),
                    "header_bytes": len(records[0]), "end_bytes": len(records[-1]),
                    "chunk_bytes": sum(map(len, records[1:-1])),
                    "bytes": sum(map(len, records)),
                    "bytes_per_leaf": sum(map(len, records)) / max(leaves, 1),
                    "history_bytes": history_bytes, "history_records": history_records,
                })
    leaves = np.array([r["leaves"] for r in rows], float)
    sizes = np.array([r["bytes"] for r in rows], float)
    b, a = np.polyfit(leaves, sizes, 1)
    return {"data": data, "release_every": RELEASE_EVERY, "rows": rows,
            "fit": {"a_bytes": a, "b_bytes_per_leaf": b}}


def format_table(report: dict[str, Any]) -> str:
    """The Markdown table of :func:`release_sizes`."""
    lines = ["| t | occupied leaves | records | header | chunks | end | release bytes | "
             "bytes/leaf | history up to t (a release every 1000) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in report["rows"]:
        lines.append(f"| {r['t']:,} | {r['leaves']:,} | {r['records']} | {r['header_bytes']:,} |"
                     f" {r['chunk_bytes']:,} | {r['end_bytes']} | {r['bytes']:,} | "
                     f"{r['bytes_per_leaf']:.2f} | {r['history_bytes'] / 2**20:,.1f} MiB |")
    fit = report["fit"]
    lines.append(f"\nfit: bytes ≈ {fit['a_bytes']:,.0f} + {fit['b_bytes_per_leaf']:.2f} × "
                 f"leaves; data: {report['data']}")
    return "\n".join(lines)


@click.command("release-size")
@click.option("--records", type=click.IntRange(min=CHECKPOINTS[0]), default=CHECKPOINTS[-1],
              show_default=True)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
def bench_release_size(records: int, json_path: Path | None) -> None:
    """Bytes of a release by occupied leaves, and of the history up to t."""
    report = release_sizes(records)
    click.echo(format_table(report))
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2))
