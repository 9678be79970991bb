"""Materialised points (``dpsynth.points`` version 1): a release's points as Arrow IPC.

Layer: core (pyarrow, imported only when called: ``pip install dpsynth[points]``). For readers
who want no dpsynth library: a release's t points, mapped back to the record schema's units
(:meth:`~dpsynth.schema.Schema.from_unit` of :attr:`Release.points`), as a table with one
non-null float64 column per schema column, named like it. Every chunk is a complete Arrow IPC
**stream** (schema, one record batch, end-of-stream marker) of at most ``max_chunk_bytes``, so
any Arrow reader (pyarrow, polars, DuckDB, Arrow Java, arrow-rs, …) decodes a Kafka record on
its own; the Arrow schema's metadata key ``dpsynth`` holds a JSON object that identifies the
chunk (``run_id``, ``partition``, ``sequence``, ``chunk``, ``n_chunks``, ``first_row``,
``rows``, ``t``), the columns' bounds and the release's public metadata (schemas/README.md
"Materialised points"; schemas/points.v1.json describes that object).

Privacy: post-processing only. The points are the deterministic, data-independent function of
a published release that every reader computes; chunk sizes and counts follow from t (public
under replacement, the released noisy size under add/remove) and d.

>>> import numpy as np
>>> from dpsynth.schema import Schema
>>> from dpsynth.release.model import Release
>>> schema = Schema.from_dict({"version": 1, "columns": [{"name": "age", "lower": 0,
...                                                      "upper": 100}]})
>>> release = Release(t=3, depth=1, leaf_counts=np.array([2, 1]),
...                   metadata={"d": 1, "sequence": 4, "placement": "centre"})
>>> import pyarrow as pa
>>> table = pa.ipc.open_stream(encode_points(release, schema, run_id="r", partition=0)[0]
...                            ).read_all()
>>> table.column_names, table.column("age").to_pylist()
(['age'], [25.0, 25.0, 75.0])
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from dpsynth.errors import ConfigError
from dpsynth.release.framing import DEFAULT_MAX_CHUNK_BYTES, canonical
from dpsynth.release.model import Release
from dpsynth.schema import Schema

#: The ``format`` of every chunk's description, and its version.
POINTS_FORMAT = "dpsynth.points"
POINTS_VERSION = 1
#: The Arrow schema metadata key holding the description (JSON, UTF-8).
METADATA_KEY = b"dpsynth"
#: Bytes a chunk may need beyond its fixed part (measured on an empty chunk) and 8 bytes per
#: value: a non-empty batch describes its buffers at a few more bytes; the rest is a margin
#: (encode_points still refuses any chunk over the limit).
_SLACK = 64


def pyarrow_module() -> Any:
    """pyarrow, or a :class:`ConfigError` saying how to install it."""
    try:
        import pyarrow
        import pyarrow.ipc  # noqa: F401 - the IPC writers
    except ImportError:
        raise ConfigError(
            "the materialised points (points_format arrow) need pyarrow: "
            "pip install 'dpsynth[points]'") from None
    return pyarrow


def describe_chunk(release: Release, schema: Schema, *, run_id: str, partition: int,
                   chunk: int, n_chunks: int, first_row: int, rows: int) -> dict[str, Any]:
    """The JSON object of one chunk (schemas/points.v1.json): identity, position, columns."""
    return {
        "format": POINTS_FORMAT, "version": POINTS_VERSION,
        "run_id": run_id, "partition": int(partition), "sequence": release.sequence,
        "chunk": chunk, "n_chunks": n_chunks, "first_row": first_row, "rows": rows,
        "t": int(release.t),
        "columns": [{"name": c.name, "lower": c.lower, "upper": c.upper}
                    for c in schema.columns],
        "release": canonical(dict(release.metadata), "release metadata"),
    }


def _json(description: dict[str, Any]) -> bytes:
    return json.dumps(description, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False, default=_bytes_hex).encode()


def _bytes_hex(value: Any) -> str:
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _arrow_schema(pa: Any, schema: Schema, description: dict[str, Any]) -> Any:
    return pa.schema([pa.field(name, pa.float64(), nullable=False) for name in schema.names],
                     metadata={METADATA_KEY: _json(description)})


def _stream(pa: Any, arrow_schema: Any, columns: np.ndarray, start: int, stop: int) -> bytes:
    """One Arrow IPC stream: the schema, rows [start, stop) as one record batch, the end."""
    batch = pa.record_batch([pa.array(column[start:stop]) for column in columns],
                            schema=arrow_schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, arrow_schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def points_in_units(release: Release, schema: Schema) -> np.ndarray:
    """The release's points mapped to ``schema``'s units, column-major (d × t, contiguous)."""
    if schema.d != release.d:
        raise ConfigError(f"the schema's {schema.d} columns {schema.names} do not match the "
                          f"release's d ({release.d}); give the run's record schema")
    return np.ascontiguousarray(schema.from_unit(release.points).T)


def rows_per_chunk(release: Release, schema: Schema, *, run_id: str, partition: int,
                   max_chunk_bytes: int) -> int:
    """The most rows a chunk of ``release`` holds within ``max_chunk_bytes``.

    The fixed part (schema message, metadata, batch header) is measured by encoding an empty
    chunk whose numbers have t's digits, the largest any chunk of this release writes.
    """
    pa = pyarrow_module()
    t = int(release.t)
    widest = describe_chunk(release, schema, run_id=run_id, partition=partition, chunk=t,
                            n_chunks=t, first_row=t, rows=t)
    empty = np.zeros((schema.d, 0))
    fixed = len(_stream(pa, _arrow_schema(pa, schema, widest), empty, 0, 0))
    rows = (max_chunk_bytes - fixed - _SLACK) // (8 * schema.d)
    if rows < 1:
        raise ConfigError(
            f"a chunk of materialised points needs more than {max_chunk_bytes} bytes for one "
            f"row of {schema.d} columns (its schema and metadata take {fixed}); raise "
            "release_max_record_bytes")
    return int(rows)


def encode_points(release: Release, schema: Schema, *, run_id: str, partition: int,
                  max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES) -> list[bytes]:
    """The release's points in units as Arrow IPC streams of at most ``max_chunk_bytes`` each.

    Rows stay in :attr:`Release.points` order (leaf by leaf in Morton order); chunk k holds
    rows ``first_row`` … ``first_row + rows − 1``. A release of t = 0 is one chunk of no rows.
    Deterministic: the same release, schema and identity give the same bytes.
    """
    pa = pyarrow_module()
    columns = points_in_units(release, schema)
    t = columns.shape[1]
    per_chunk = rows_per_chunk(release, schema, run_id=run_id, partition=partition,
                               max_chunk_bytes=max_chunk_bytes)
    n_chunks = max(1, -(-t // per_chunk))
    out = []
    for chunk in range(n_chunks):
        start, stop = chunk * per_chunk, min((chunk + 1) * per_chunk, t)
        description = describe_chunk(release, schema, run_id=run_id, partition=partition,
                                     chunk=chunk, n_chunks=n_chunks, first_row=start,
                                     rows=stop - start)
        record = _stream(pa, _arrow_schema(pa, schema, description), columns, start, stop)
        if len(record) > max_chunk_bytes:  # rows_per_chunk's bound is wrong: never publish
            raise ConfigError(f"chunk {chunk} of the materialised points is {len(record)} "
                              f"bytes, above the limit {max_chunk_bytes}")
        out.append(record)
    return out


def write_points_file(path: str | os.PathLike[str], release: Release, schema: Schema, *,
                      run_id: str, partition: int) -> None:
    """Write the release's points in units as one Arrow IPC **file** (Feather v2), atomically.

    One record batch of all t rows; the description is that of a single chunk (``chunk`` 0,
    ``n_chunks`` 1). Readable by ``pyarrow.ipc.open_file``, ``pandas.read_feather``,
    ``polars.read_ipc``.
    """
    pa = pyarrow_module()
    columns = points_in_units(release, schema)
    t = columns.shape[1]
    description = describe_chunk(release, schema, run_id=run_id, partition=partition, chunk=0,
                                 n_chunks=1, first_row=0, rows=t)
    arrow_schema = _arrow_schema(pa, schema, description)
    batch = pa.record_batch([pa.array(column) for column in columns], schema=arrow_schema)
    target = os.fspath(path)
    tmp = f"{target}.tmp-{os.getpid()}"
    with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, arrow_schema) as writer:
        writer.write_batch(batch)
    os.replace(tmp, target)


def check_points_output(schema: Schema, max_chunk_bytes: int,
                        metadata: dict[str, Any] | None = None) -> None:
    """Fail at start when points cannot be published: pyarrow missing, or a record limit too
    small for one row of ``schema`` with ``metadata`` (the run's release metadata) once t and
    the sequence have 13 digits. Materialises nothing."""
    big = 10**12
    probe = Release(t=big, depth=0, leaf_counts=np.array([big]),
                    metadata={**(metadata or {}), "d": schema.d, "sequence": big, "t": big})
    rows_per_chunk(probe, schema, run_id="probe", partition=0, max_chunk_bytes=max_chunk_bytes)
