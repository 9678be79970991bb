"""``dpsynth offline``: one offline ε-DP synthetic copy of a file (PMM, PSMM or lowdim).

Layer: adapter. Reads a CSV/NDJSON file through a declared :class:`dpsynth.schema.Schema` (as
``dpsynth run`` does), runs :func:`~dpsynth.offline.pmm_leaves`,
:func:`~dpsynth.offline.psmm_measure` or :func:`~dpsynth.offline.lowdim_release` with the run's
noise key (``DPSYNTH_NOISE_KEY``, never printed: only its fingerprint) and writes, side by
side:

``OUT`` (``.csv`` or ``.ndjson``/``.jsonl``)
    The synthetic records in the schema's original units.
``OUT.meta.json``
    Public metadata: method, ε, neighbour notion, key fingerprint, n_out, parameters.
``OUT.release.bin`` (pmm and psmm)
    The compact release (leaf counts + public placement seed) in release format v1, readable
    by ``dpsynth inspect``; lowdim's points do not live on the tree of [0,1]^d, so it has none.

Only these three files are private outputs. The input size is written to the metadata only
under replacement neighbours, where it is public; the counts of the input and the rejection
reasons go to standard error as operator diagnostics. Under add/remove a file without a valid
record still gets its synthetic copy (exit status 0: the count is private); under replacement
it is refused (exit status 1). An ``OUT.release.bin`` of an earlier run that this method does
not write (lowdim) is removed.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console

from dpsynth.cli.common import (
    bind_key_to_input,
    load_source,
    print_key,
    resolve_key,
    stderr_console,
)
from dpsynth.cli.errors import EXIT_STATUS_HELP, InputError, fail_on_dpsynth_error
from dpsynth.cli.options import declared_options
from dpsynth.cli.outputs import Diagnostics
from dpsynth.noise import KeyedNoise
from dpsynth.offline.lowdim import lowdim_release
from dpsynth.offline.pmm import pmm_leaves
from dpsynth.offline.psmm import psmm_measure
from dpsynth.params import PARAMS
from dpsynth.release import RELEASE_SCHEMA_VERSION, Release, encode_release, write_release_file
from dpsynth.schema import Schema

METHODS = PARAMS["offline_mechanism"].values
CSV_SUFFIXES = (".csv",)
NDJSON_SUFFIXES = (".ndjson", ".jsonl")
ALGORITHMS = {"pmm": "diss. Alg 4 (PMM, C.13)", "psmm": "diss. Alg 1 + Alg 2 (PSMM, C.13)",
              "lowdim": "diss. Alg 5-9 (private PCA, C.13)"}


def _release_of(method: str, points: np.ndarray, epsilon: float, key: bytes, neighbours: str,
                max_depth: int) -> Release:
    """pmm / psmm as a Release (t = n_out points, Morton leaf counts, public placement)."""
    d = points.shape[1]
    if method == "pmm":
        depth, leaves, seed = pmm_leaves(points, epsilon, key, neighbours=neighbours,
                                         max_depth=max_depth)
        extra: dict[str, Any] = {"placement": "uniform", "max_depth": max_depth}
    else:
        res = psmm_measure(points, epsilon, key, neighbours=neighbours)
        depth, leaves, seed = res.depth, res.leaf_counts, bytes(32)
        extra = {"placement": "centre", "side_bits": res.side_bits,
                 "lp_variables": res.lp.variables, "noise_scale": res.metadata["noise_scale"]}
    metadata = {"release_schema": RELEASE_SCHEMA_VERSION, "sequence": 0, "partition": 0,
                "t": int(leaves.sum()), "d": d, "depth": depth, "epsilon": float(epsilon),
                "neighbours": neighbours, "method": method,
                "key_fingerprint": KeyedNoise(key).fingerprint(), **extra}
    return Release(int(leaves.sum()), depth, leaves, metadata, seed)


def write_records(path: Path, schema: Schema, unit_points: np.ndarray) -> None:
    """Write points (in [0,1]^d) as records in the schema's units: CSV or NDJSON by suffix."""
    records = schema.records_from_unit(unit_points)
    if path.suffix in CSV_SUFFIXES:
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(schema.names))
            writer.writeheader()
            writer.writerows(records)
    else:
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)


@click.command(name="offline", epilog=EXIT_STATUS_HELP)
@click.option("--input", "input_path", required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="CSV with a header, or NDJSON of objects (.gz allowed).")
@click.option("--schema", "schema_path",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Schema JSON (schemas/) mapping named columns to [0,1]^d; without it every "
                   "column of the CSV header is a coordinate in [0,1]; NDJSON needs it.")
@declared_options("offline_mechanism", "epsilon", "neighbours", "target_dim", "max_depth")
@click.option("--limit", type=click.IntRange(min=1), help="Use only the first N records.")
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Synthetic file: .csv or .ndjson/.jsonl (OUT.meta.json is written beside).")
@fail_on_dpsynth_error
def offline(input_path: Path, schema_path: Path | None, offline_mechanism: str, epsilon: float,
             neighbours: str, target_dim: int | None, max_depth: int, limit: int | None,
             out: Path) -> None:
    """Offline ε-DP synthetic copy of a CSV/NDJSON file, in the original units."""
    method = offline_mechanism
    if out.suffix not in CSV_SUFFIXES + NDJSON_SUFFIXES:
        raise click.UsageError(f"--out ({out.name}) must end in .csv, .ndjson or .jsonl")
    console, err = Console(highlight=False, soft_wrap=True), stderr_console()
    noise_key = resolve_key()
    key = noise_key.reveal()
    source = load_source(input_path, schema_path, None, 1, 0, limit)
    print_key(console, noise_key)
    for warning in source.warnings:
        err.print(f"[bold yellow]{warning}[/]", highlight=False)
    diagnostics = Diagnostics(read=source.n)
    parts = []
    for _, batch, report, rejects, _ in source.batches(50_000):
        parts.append(batch)
        diagnostics.reject(reason for _, reason in rejects)
        diagnostics.clip(report)
    points = np.concatenate(parts) if parts else np.zeros((0, source.d))
    diagnostics.accepted = len(points)
    diagnostics.print(err)
    if len(points) == 0 and neighbours == "replace":  # the count is public under replacement
        raise InputError(f"{input_path} has no valid record for the schema (reasons above)")
    schema = source.units or source.schema
    assert schema is not None
    params: dict[str, Any] = {}
    release: Release | None = None
    if method == "lowdim":
        res = lowdim_release(points, epsilon, key, target_dim, neighbours=neighbours)
        synthetic = res.points
        params = {k: v for k, v in res.metadata.items() if k not in ("method", "epsilon")}
    else:
        release = _release_of(method, points, epsilon, key, neighbours, max_depth)
        synthetic = release.points
    bind_key_to_input(noise_key, f"dpsynth offline over {source.label}", source.identity,
                      click.get_current_context().params, ("input_path", "limit", "out"),
                      source.setting_files)  # privacy: P13 (one key, one input)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_records(out, schema, synthetic)
    meta: dict[str, Any] = {
        "method": method, "algorithm": ALGORITHMS[method], "epsilon": float(epsilon),
        "neighbours": neighbours, "key_fingerprint": KeyedNoise(key).fingerprint(),
        "n_out": int(len(synthetic)), "d": int(points.shape[1]), "schema": schema.to_dict(),
        **params,
    }
    if neighbours == "replace":
        meta["records_in"] = int(len(points))  # public under replacement neighbours
    if release is not None:
        meta["release"] = {k: v for k, v in release.metadata.items() if k != "d"}
        release_path = out.with_name(out.name + ".release.bin")
        write_release_file(release_path, encode_release(
            release, run_id=f"snapshot-{method}", partition=0, sequence=0))
        meta["release_file"] = release_path.name
    else:  # an earlier pmm/psmm copy's release must not stand beside this one
        out.with_name(out.name + ".release.bin").unlink(missing_ok=True)
    meta_path = out.with_name(out.name + ".meta.json")
    meta_path.write_text(json.dumps(meta, indent=2, default=float) + "\n")
    console.print(f"{method}: {len(synthetic):,} synthetic records (ε = {epsilon:g}, "
                  f"{neighbours}) → {out}; metadata {meta_path.name}")
