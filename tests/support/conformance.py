"""Conformance vectors of the release formats: ``schemas/conformance/vectors.json``.

Layer: test kit (not shipped). ``python -m tests.support.conformance`` (or ``make vectors``)
writes the file; ``--check`` exits 1 when the committed file differs from a fresh build
(tests/conformance/test_release_vectors.py does the same and checks the Python reader against
every vector; clients/java runs them through the JVM reader).

Every expectation is written from the *source* of the records, never by decoding them: valid
releases carry the leaf counts and the points of the :class:`~dpsynth.release.Release` that
was encoded, and every invalid record list or assembler stream carries the reason code it was
built to provoke (schemas/README.md "Reason codes"). Releases come from the real synthesizers
(d = 1, 2, 3, both neighbour notions, both placements) under a fixed public test key, plus a
few made by hand for the edges (depth 0, the last cell of a deep release, t = 0).
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from dpsynth.noise import KeyedNoise, encode_context
from dpsynth.noise._kernels import chacha20_block
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import Release, TabularRelease, encode_release, encode_tabular_release
from dpsynth.schema import Schema
from dpsynth.tabular import Domain, TabularSynthesizer
from tests.support.tabular import feed_steps

VECTORS = Path(__file__).resolve().parents[2] / "schemas" / "conformance" / "vectors.json"
#: A public test key: these releases protect nothing.
KEY = bytes(range(100, 132))
RUN = "conformance"
UNITS = {"version": 1, "columns": [{"name": "lon", "lower": -74.3, "upper": -73.7},
                                   {"name": "lat", "lower": 40.5, "upper": 40.95},
                                   {"name": "alt", "lower": -10.0, "upper": 1000.0}]}


# ---- records -----------------------------------------------------------------------------


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _bits(values: np.ndarray) -> list[str]:
    """IEEE-754 binary64 bit patterns (16 hex digits each), row-major."""
    flat = np.ascontiguousarray(values, dtype="<f8").reshape(-1).view("<u8")
    return [format(int(v), "016x") for v in flat]


def _unpack(record: bytes) -> dict[str, Any]:
    return msgpack.unpackb(record, raw=False)


def _pack(obj: dict[str, Any]) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def _repack(record: bytes, **changes: Any) -> bytes:
    rec = _unpack(record)
    rec.update(changes)
    return _pack(rec)


def _reseal(records: list[bytes]) -> list[bytes]:
    """The end record's checksum recomputed over the (altered) header and chunks."""
    digest = hashlib.sha256(b"".join(records[:-1])).hexdigest()
    return [*records[:-1], _repack(records[-1], sha256=digest)]


def _set_count(records: list[bytes], position: int, leaf: int,
               count: int | None = None) -> list[bytes]:
    """One leaf's count set to ``count`` (default: another count in [1, 3])."""
    out = list(records)
    counts = np.frombuffer(_unpack(out[position])["counts"], "<i8").copy()
    counts[leaf] = counts[leaf] % 3 + 1 if count is None else count
    out[position] = _repack(out[position], counts=counts.tobytes())
    return out


def _chunked(encode: Callable[[int], list[bytes]], chunks: int) -> list[bytes]:
    """The records at the smallest ``max_chunk_bytes`` that fits the header: at least
    ``chunks`` chunks (the header of a real release, its metadata, sets that bound)."""
    for limit in range(64, 4096):
        try:
            records = encode(limit)
        except ValueError:  # ConfigError: a record does not fit yet
            continue
        assert len(records) - 2 >= chunks, "pick another release for this chunk count"
        return records
    raise AssertionError("no chunk size fits the header")


# ---- point releases ----------------------------------------------------------------------


def _data(n: int, d: int, seed: int) -> np.ndarray:
    """A blob drifting along the first axis: public test data (not privacy noise)."""
    rng = np.random.default_rng(seed)
    centre = np.full((n, d), 0.35)
    centre[:, 0] = np.linspace(0.15, 0.85, n)
    return np.clip(centre + rng.normal(0.0, 0.1, (n, d)), 0.0, 1.0)


def _online(d: int, neighbours: str, mechanism: str, *, placement: str = "uniform",
            partition: int = 0) -> Release:
    """The third release of a synthesizer fed 300 records (100 per step)."""
    synth = OnlineSynthesizer(d, 1.0, KEY, 100, mechanism, max_depth=6 + 3 * d,
                              placement=placement, partition=partition, neighbours=neighbours)
    x = _data(300, d, seed=d)
    if neighbours == "replace":
        return synth.extend(x)[-1]
    for i in range(3):
        synth.add(x[100 * i:100 * (i + 1)])
        release = synth.step()
    return release


def _made(d: int, depth: int, cells: list[int], counts: list[int], label: str,
          placement: str = "uniform") -> Release:
    """A release built by hand (any consistent leaf counts are a valid release)."""
    occupied = (np.array(cells, np.int64), np.array(counts, np.int64))
    seed = hashlib.sha256(label.encode()).digest()
    return Release(t=sum(counts), depth=depth, leaf_counts=None, placement_seed=seed,
                   metadata={"d": d, "placement": placement, "note": label}, occupied=occupied)


def _tiny(sequence: int, partition: int = 0) -> Release:
    """A small release of 24 leaves (3 chunks at the smallest record size) for the streams."""
    cells = [(7 * i + sequence + 3 * partition) % 256 for i in range(24)]
    order = sorted(set(cells))
    return _made(2, 8, order, [1 + (i + sequence) % 3 for i in range(len(order))],
                 f"tiny {partition}/{sequence}")


def _point_vector(name: str, about: str, release: Release, records: list[bytes],
                  schema: dict[str, Any] | None = None) -> dict[str, Any]:
    head = _unpack(records[0])
    counts = np.asarray(release.leaf_counts)
    cells = np.flatnonzero(counts)
    points = release.points
    expect: dict[str, Any] = {
        "run_id": head["run_id"], "partition": head["partition"], "sequence": head["sequence"],
        "t": int(release.t), "depth": int(release.depth), "d": release.d,
        "metadata": release.metadata, "placement_seed": bytes(release.placement_seed).hex(),
        "n_chunks": len(records) - 2,
        "cells": cells.tolist(), "counts": counts[cells].tolist(),
        "points": _bits(points),
    }
    if schema is not None:
        expect["record_schema"] = schema
        expect["points_in_units"] = _bits(Schema.from_dict(schema).from_unit(points))
    return {"name": name, "about": about, "records": [_b64(r) for r in records],
            "expect": json.loads(json.dumps(expect))}


def _encode(release: Release, sequence: int, partition: int = 0,
            limit: int = 256_000) -> list[bytes]:
    return encode_release(release, run_id=RUN, partition=partition, sequence=sequence,
                          max_chunk_bytes=limit)


def point_vectors() -> list[dict[str, Any]]:
    out = []
    online = [
        ("d1/replace/adaptive", 1, "replace", "adaptive", "uniform", 2),
        ("d2/replace/paper", 2, "replace", "paper", "uniform", 1),
        ("d3/replace/paper", 3, "replace", "paper", "uniform", 1),
        ("d1/add_remove/guided", 1, "add_remove", "guided", "uniform", 1),
        ("d2/add_remove/adaptive", 2, "add_remove", "adaptive", "uniform", 3),
        ("d3/add_remove/guided", 3, "add_remove", "guided", "uniform", 1),
        ("d2/replace/centre", 2, "replace", "adaptive", "centre", 1),
    ]
    for name, d, neighbours, mechanism, placement, chunks in online:
        release = _online(d, neighbours, mechanism, placement=placement, partition=d)
        sequence = int(release.metadata["sequence"])
        records = _chunked(lambda m, r=release, s=sequence, p=d: _encode(r, s, p, m), chunks) \
            if chunks > 1 else _encode(release, sequence, d)
        schema = {**UNITS, "columns": UNITS["columns"][:d]}
        out.append(_point_vector(
            f"points/{name}", f"OnlineSynthesizer(d={d}, {neighbours}, {mechanism}, "
            f"{placement}), release {sequence}", release, records, schema))
    empty = OnlineSynthesizer(2, 1.0, KEY, 100).release()
    out.append(_point_vector("points/t0", "t = 0 (before any record): no chunk", empty,
                             _encode(empty, 0)))
    made = [
        ("depth0", "depth 0: one leaf, the whole cube", _made(2, 0, [0], [3], "depth0")),
        ("d1/depth24-edges", "d = 1, depth 24: the first and the last leaf",
         _made(1, 24, [0, (1 << 24) - 1], [2, 3], "depth24")),
        ("d3/depth20", "d = 3, depth 20: the last leaf and one past the middle",
         _made(3, 20, [5, (1 << 19) + 1, (1 << 20) - 1], [1, 2, 1], "depth20")),
        ("d3/depth7-centre", "d = 3, depth 7 (not a multiple of d), centre placement",
         _made(3, 7, [0, 77, 127], [2, 1, 3], "depth7", "centre")),
    ]
    for name, about, release in made:
        out.append(_point_vector(f"points/{name}", about, release, _encode(release, 1)))
    for partition, sequence in ((0, 0), (0, 1), (0, 2), (0, 3), (1, 1)):
        release = _tiny(sequence, partition)
        records = _chunked(lambda m, r=release, s=sequence, p=partition: _encode(r, s, p, m), 3)
        out.append(_point_vector(f"points/tiny/p{partition}-s{sequence}",
                                 "24 leaves in 3 chunks (used by the streams)", release, records))
    return out


# ---- tabular releases --------------------------------------------------------------------


def _tabular_vector(name: str, about: str, release: TabularRelease,
                    records: list[bytes]) -> dict[str, Any]:
    head = _unpack(records[0])
    rows = np.asarray(release.records)
    expect = {"run_id": head["run_id"], "partition": head["partition"],
              "sequence": int(release.sequence), "step": int(release.step),
              "p": int(rows.shape[1]), "n_rows": int(rows.shape[0]), "width": head["width"],
              "metadata": release.metadata, "n_chunks": len(records) - 2,
              "rows": rows.astype(np.int64).tolist()}
    return {"name": name, "about": about, "records": [_b64(r) for r in records],
            "expect": json.loads(json.dumps(expect))}


def tabular_vectors() -> list[dict[str, Any]]:
    domain = Domain.from_dict({"version": 1, "attributes": [
        {"name": "sex", "categories": ["F", "M"]}, {"name": "age", "size": 6},
        {"name": "inc", "categories": ["lo", "hi"]}]})
    rng = np.random.default_rng(7)  # public test data
    sex = rng.integers(0, 2, 200)
    age = np.minimum(rng.poisson(2 + sex), 5)
    codes = np.stack([sex, age, (age > 2).astype(int)], 1)
    out = []
    for neighbours in ("add_remove", "replace"):
        synth = TabularSynthesizer(domain, 1.0, KEY, release_every=100, workloads_per_step=1,
                                   neighbours=neighbours)
        release = feed_steps(synth, codes)[-1]
        out.append(_tabular_vector(f"tabular/{neighbours}", f"TabularSynthesizer({neighbours})"
                                   ", step 2", release, encode_tabular_release(
                                       release, run_id=RUN, partition=0)))
    many = TabularRelease(3, 3, (np.arange(120).reshape(40, 3) * 7) % 11, {"note": "many"})
    out.append(_tabular_vector("tabular/chunks", "1-byte codes in 3 chunks", many, _chunked(
        lambda m: encode_tabular_release(many, run_id=RUN, partition=1, max_chunk_bytes=m), 3)))
    made = [
        ("width2", "2-byte codes, 3 columns", np.array([[0, 300, 7], [65535, 1, 256]])),
        ("width4", "4-byte codes, 1 column", np.array([[70000], [0], [2**32 - 1]])),
        ("empty", "no rows: no chunk", np.zeros((0, 4), np.int64)),
    ]
    for name, about, rows in made:
        release = TabularRelease(5, 4, rows, {"algorithm": "by hand", "note": name})
        out.append(_tabular_vector(f"tabular/{name}", about, release,
                                   encode_tabular_release(release, run_id=RUN, partition=2)))
    return out


# ---- invalid record lists ----------------------------------------------------------------


def _swap(records: list[bytes], i: int, j: int) -> list[bytes]:
    out = list(records)
    out[i], out[j] = out[j], out[i]
    return out


def invalid_vectors(points: dict[str, list[bytes]],
                    tables: dict[str, list[bytes]]) -> list[dict[str, Any]]:
    r = points["points/tiny/p0-s1"]  # header, 3 chunks, end
    other = points["points/tiny/p0-s2"]
    deep = points["points/d3/depth20"]
    tab = tables["tabular/chunks"]
    cells = np.frombuffer(_unpack(r[2])["cells"], "<u4").copy()
    first = int(np.frombuffer(_unpack(r[1])["cells"], "<u4")[-1])
    cases: list[tuple[str, str, list[bytes], str]] = [
        ("points", "empty", [], "truncated"),
        ("points", "header only", r[:1], "truncated"),
        ("points", "cut mid-chunks", r[:3], "truncated"),
        ("points", "no end record", r[:-1], "truncated"),
        ("points", "no header", r[1:], "missing_header"),
        ("points", "chunk 1 missing", [*r[:2], *r[3:]], "reordered"),
        ("points", "chunks 1 and 2 swapped", _swap(r, 2, 3), "reordered"),
        ("points", "last chunk missing", [*r[:3], r[-1]], "missing_chunks"),
        ("points", "end names fewer chunks", [*r[:-1], _repack(r[-1], n_chunks=2)],
         "missing_chunks"),
        ("points", "chunk 1 twice", [*r[:3], r[2], *r[3:]], "duplicate_chunk"),
        ("points", "chunk index beyond n_chunks", [*r[:3], _repack(r[3], index=9), r[4]],
         "extra_chunk"),
        ("points", "negative chunk index", [r[0], _repack(r[1], index=-1), *r[2:]], "bad_chunk"),
        ("points", "a chunk of another sequence", [*r[:2], other[2], *r[3:]], "mixed"),
        ("points", "a second header", [*r[:2], r[0], *r[2:]], "unexpected_header"),
        ("points", "a record after the end", [*r, r[1]], "trailing_record"),
        ("points", "count changed, checksum kept", _set_count(r, 2, 0), "bad_checksum"),
        ("points", "end checksum of other bytes",
         [*r[:-1], _repack(r[-1], sha256=hashlib.sha256(b"other").hexdigest())],
         "bad_checksum"),
        ("points", "checksum in upper case", [*r[:-1], _repack(
            r[-1], sha256=_unpack(r[-1])["sha256"].upper())], "bad_checksum"),
        ("points", "header t changed, checksum kept", [_repack(r[0], t=99), *r[1:]],
         "bad_checksum"),
        ("points", "a count moved to another leaf, resealed",
         _reseal(_set_count(_set_count(r, 1, 0, 5), 2, 0, 5)), "bad_sum"),
        ("points", "header t changed, resealed", _reseal([_repack(r[0], t=99), *r[1:]]),
         "bad_sum"),
        ("points", "zero count, resealed", _reseal(_set_count(r, 2, 1, 0)), "bad_chunk"),
        ("points", "count above t, resealed", _reseal(_set_count(r, 2, 1, 10**6)), "bad_chunk"),
        ("points", "cell repeated across chunks, resealed", _reseal([*r[:2], _repack(
            r[2], cells=np.concatenate([[first], cells[1:]]).astype("<u4").tobytes()), *r[3:]]),
         "bad_chunk"),
        ("points", "cell beyond 2^depth, resealed", _reseal([*r[:3], _repack(r[3], cells=(
            np.frombuffer(_unpack(r[3])["cells"], "<u4") + np.uint32(256)).tobytes()), r[4]]),
         "bad_chunk"),
        ("points", "counts one byte short, resealed",
         _reseal([*r[:2], _repack(r[2], counts=_unpack(r[2])["counts"][:-1]), *r[3:]]),
         "bad_chunk"),
        ("points", "not msgpack", [*r[:2], b"\xc1garbage", *r[2:]], "undecodable"),
        ("points", "msgpack but not a map", [*r[:2], _pack([1, 2]), *r[2:]],  # type: ignore[arg-type]
         "undecodable"),
        ("points", "two msgpack values in one record", [*r[:2], r[2] + b"\x00", *r[3:]],
         "undecodable"),
        ("points", "unknown kind", [*r[:2], _repack(r[2], kind="patch"), *r[3:]], "bad_kind"),
        ("points", "an extra field in a chunk", [r[0], _repack(r[1], note="x"), *r[2:]],
         "bad_keys"),
        ("points", "a field missing from the end", [*r[:-1], _pack(
            {k: v for k, v in _unpack(r[-1]).items() if k != "n_chunks"})], "bad_keys"),
        ("points", "format 2", [_repack(r[0], format=2), *r[1:]], "unsupported_format"),
        ("points", "format as a float", [_repack(r[0], format=1.0), *r[1:]],
         "unsupported_format"),
        ("points", "another leaf encoding", [_repack(r[0], leaf_encoding="dense"), *r[1:]],
         "unsupported_format"),
        ("points", "a tabular release", tab, "unsupported_format"),
        ("points", "header d disagrees with metadata", [_repack(r[0], d=3), *r[1:]],
         "bad_header"),
        ("points", "negative t", [_repack(r[0], t=-1), *r[1:]], "bad_header"),
        ("points", "n_chunks above 2^depth", [_repack(r[0], n_chunks=257), *r[1:]],
         "bad_header"),
        ("points", "placement seed as a string", [_repack(r[0], placement_seed="x"), *r[1:]],
         "bad_header"),
        ("points", "depth 64", [_repack(r[0], depth=64), *r[1:]], "bad_header"),
        ("points", "depth 20 read with max_depth 19", deep, "depth_limit"),
        ("points", "empty run_id", [_repack(r[0], run_id=""), *r[1:]], "bad_identity"),
        ("points", "partition 2^63", [*r[:2], _repack(r[2], partition=1 << 63), *r[3:]],
         "bad_identity"),
        ("tabular", "empty", [], "truncated"),
        ("tabular", "no end record", tab[:-1], "truncated"),
        ("tabular", "no header", tab[1:], "missing_header"),
        ("tabular", "chunks 0 and 1 swapped", _swap(tab, 1, 2), "reordered"),
        ("tabular", "chunk 0 twice", [*tab[:2], tab[1], *tab[2:]], "duplicate_chunk"),
        ("tabular", "last chunk missing", [*tab[:-2], tab[-1]], "missing_chunks"),
        ("tabular", "rows changed, checksum kept",
         [tab[0], _repack(tab[1], rows=bytes(len(_unpack(tab[1])["rows"]))), *tab[2:]],
         "bad_checksum"),
        ("tabular", "n_rows changed, resealed",
         _reseal([_repack(tab[0], n_rows=_unpack(tab[0])["n_rows"] + 1), *tab[1:]]), "bad_sum"),
        ("tabular", "a point release", r, "unsupported_format"),
        ("tabular", "width 3", [_repack(tab[0], width=3), *tab[1:]], "bad_header"),
        ("tabular", "a chunk of another partition", [tab[0], _repack(tab[1], partition=9),
                                                     *tab[2:]], "mixed"),
        ("tabular", "a record after the end", [*tab, tab[1]], "trailing_record"),
    ]
    out = []
    for decoder, name, records, reason in cases:
        case = {"name": f"{decoder}/{name}", "decoder": decoder,
                "records": [_b64(x) for x in records], "reason": reason}
        if "max_depth 19" in name:
            case["max_depth"] = 19
        out.append(case)
    return out


# ---- assembler streams -------------------------------------------------------------------


def stream_vectors(points: dict[str, list[bytes]]) -> list[dict[str, Any]]:
    """Records as a topic consumer meets them, and the assembler's outcome for each."""
    def named(p: int, s: int) -> list[bytes]:
        return points[f"points/tiny/p{p}-s{s}"]

    a, b, c = named(0, 1), named(0, 2), named(1, 1)
    done = {"a": {"release": "points/tiny/p0-s1"}, "b": {"release": "points/tiny/p0-s2"},
            "c": {"release": "points/tiny/p1-s1"}, "s0": {"release": "points/tiny/p0-s0"},
            "s3": {"release": "points/tiny/p0-s3"}}

    def rej(code: str) -> dict[str, str]:
        return {"reject": code}

    no: None = None
    bad_key = _repack(a[1], run_id="")
    streams: list[tuple[str, dict[str, int], list[tuple[bytes, Any]]]] = [
        ("interleaved releases of two partitions", {},
         [*(x for pair in zip(a, c, strict=True) for x in ((pair[0], no), (pair[1], no)))][:-2]
         + [(a[-1], done["a"]), (c[-1], done["c"])]),
        ("duplicates: a whole release again, and a chunk twice", {},
         [*((x, no) for x in a[:-1]), (a[-1], done["a"]), *((x, no) for x in a),
          (b[0], no), (b[1], no), (b[1], no), (b[0], no), (b[2], no), (b[3], no),
          (b[-1], done["b"])]),
        ("chunks out of order before the end", {},
         [(a[0], no), (a[3], no), (a[1], no), (a[2], no), (a[-1], done["a"])]),
        ("orphan chunk and end, then the whole release", {},
         [(a[1], rej("no_header")), (a[-1], rej("no_header")), *((x, no) for x in a[:-1]),
          (a[-1], done["a"])]),
        ("a missing chunk, then a complete retry", {},
         [(a[0], no), (a[1], no), (a[3], no), (a[-1], rej("missing_chunks")),
          *((x, no) for x in a[:-1]), (a[-1], done["a"])]),
        ("a corrupt copy, then a complete retry", {},
         [*((x, no) for x in _set_count(a, 2, 0)[:-1]), (a[-1], rej("bad_checksum")),
          *((x, no) for x in a[:-1]), (a[-1], done["a"])]),
        ("two versions of a chunk", {},
         [(a[0], no), (a[1], no), (_set_count(a, 1, 0)[1], rej("conflicting_chunk")),
          (a[2], rej("no_header")), *((x, no) for x in a[:-1]), (a[-1], done["a"])]),
        ("two versions of a header", {},
         [(a[0], no), (_repack(a[0], t=1), rej("conflicting_header")), (a[1], rej("no_header")),
          *((x, no) for x in a[:-1]), (a[-1], done["a"])]),
        ("a chunk index beyond n_chunks, and an unknown kind", {},
         [(a[0], no), (_repack(a[1], index=3), rej("extra_chunk")), (a[0], no),
          (_repack(a[1], kind="patch"), rej("bad_kind")), *((x, no) for x in a[:-1]),
          (a[-1], done["a"])]),
        ("garbage, a bad identity and an unreadable header", {},
         [(b"\xc1", rej("undecodable")), (bad_key, rej("bad_identity")),
          (_repack(a[0], format=2), rej("unsupported_format")), (a[1], rej("no_header")),
          *((x, no) for x in a[:-1]), (a[-1], done["a"])]),
        ("more open releases than max_pending", {"max_pending": 1},
         [(a[0], no), (c[0], rej("evicted")), *((x, no) for x in c[1:-1]), (c[-1], done["c"]),
          (a[1], rej("no_header"))]),
        ("only the last `remember` sequences are kept", {"remember": 1},
         [*((x, no) for x in named(0, 1)[:-1]), (a[-1], done["a"]),
          *((x, no) for x in b[:-1]), (b[-1], done["b"]),
          *((x, no) for x in named(0, 3)[:-1]), (named(0, 3)[-1], done["s3"]),
          *((x, no) for x in a), *((x, no) for x in named(0, 0)),
          *((x, no) for x in c[:-1]), (c[-1], done["c"])]),
        ("an older sequence after a newer one", {},
         [*((x, no) for x in b[:-1]), (b[-1], done["b"]),
          *((x, no) for x in named(0, 0)[:-1]), (named(0, 0)[-1], done["s0"])]),
    ]
    return [{"name": name, "assembler": params, "records": [_b64(x) for x, _ in steps],
             "expect": [outcome for _, outcome in steps]} for name, params, steps in streams]


# ---- keystream ---------------------------------------------------------------------------


def keystream_vectors() -> list[dict[str, Any]]:
    """Intermediate values of placement: context bytes, subkey, ChaCha20 block, uniform."""
    out = []
    for seed_label, depth, stream, event in (("zero", 10, 0, 0), ("depth24", 24, 1, 5),
                                             ("depth32", 32, (1 << 32) - 1, 2),
                                             ("high", 63, (1 << 64) - 1, (1 << 56) - 1)):
        seed = bytes(32) if seed_label == "zero" else hashlib.sha256(seed_label.encode()).digest()
        noise = KeyedNoise(seed)
        context = ("place", depth)
        words = noise.subkey(context)
        block = np.empty(16, np.uint64)
        chacha20_block(words, np.uint64(event << 8), np.uint64(stream), block)
        u = noise.uniform_at(context, np.array([stream], np.uint64), np.array([event], np.uint64))
        raw53 = ((int(block[0]) >> 11) << 32 | int(block[1])) + 1
        out.append({
            "placement_seed": seed.hex(), "depth": depth, "stream": str(stream),
            "event": str(event), "context": encode_context(context).hex(),
            "subkey": b"".join(int(w).to_bytes(4, "little") for w in words).hex(),
            "counter": str(event << 8),
            "block": [format(int(w), "08x") for w in block],
            "uniform53": str(raw53), "u": _bits(u)[0],
        })
    return out


# ---- the file ----------------------------------------------------------------------------


def build() -> str:
    """The whole vectors file as text (deterministic: the same bytes on every machine)."""
    points = point_vectors()
    tables = tabular_vectors()
    raw_points = {v["name"]: [base64.b64decode(x) for x in v["records"]] for v in points}
    raw_tables = {v["name"]: [base64.b64decode(x) for x in v["records"]] for v in tables}
    sections = {
        "keystream": keystream_vectors(),
        "points": points,
        "tabular": tables,
        "invalid": invalid_vectors(raw_points, raw_tables),
        "streams": stream_vectors(raw_points),
    }
    head = {"format": "dpsynth.conformance", "version": 1, "release_formats": [1, "tabular.v1"],
            "generated_by": "python -m tests.support.conformance",
            "spec": "schemas/README.md"}
    lines = ["{" + json.dumps(head)[1:-1] + ","]
    for i, (name, items) in enumerate(sections.items()):
        lines.append(f'"{name}": [')
        lines += [json.dumps(item, separators=(",", ":"), ensure_ascii=False)
                  + ("," if j < len(items) - 1 else "") for j, item in enumerate(items)]
        lines.append("]" + ("," if i < len(sections) - 1 else ""))
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    text = build()
    if "--check" in argv:
        same = VECTORS.exists() and VECTORS.read_text() == text
        print(f"{VECTORS}: {'up to date' if same else 'DIFFERS from a fresh build'}")
        return 0 if same else 1
    VECTORS.parent.mkdir(parents=True, exist_ok=True)
    VECTORS.write_text(text)
    print(f"wrote {VECTORS} ({len(text.encode()):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
