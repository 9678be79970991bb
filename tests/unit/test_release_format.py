"""Release wire format v1: round trips, determinism, every way a release can break (DESIGN §4)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import msgpack
import numpy as np
import pytest

from dpsynth.errors import ConfigError, DpsynthError
from dpsynth.release import (
    Release,
    ReleaseAssembler,
    ReleaseIncompleteError,
    ReleaseKey,
    decode_release,
    encode_release,
    read_release_file,
    read_release_records,
    release_key,
    write_release_file,
)
from dpsynth.release.framing import REASONS
from dpsynth.release.points_v1 import _cell_dtype as _cell_dtype

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
METADATA = {
    "d": 2,
    "epsilon": 1.0,
    "neighbours": "replace",
    "schedule": "paper",
    "placement": "uniform",
}
SMALL_CHUNKS = 500  # bytes: a few dozen leaves per chunk, so releases span many chunks


def make_release(t: int = 1000, depth: int = 8, seed: int = 0) -> Release:
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(t, rng.dirichlet(np.full(1 << depth, 0.3))).astype(np.int64)
    return Release(
        t=t,
        depth=depth,
        leaf_counts=counts,
        metadata=dict(METADATA),
        placement_seed=bytes(range(32)),
    )


def encode(release: Release, sequence: int = 3, **kw: object) -> list[bytes]:
    kw.setdefault("max_chunk_bytes", SMALL_CHUNKS)
    return encode_release(release, run_id="run-a", partition=1, sequence=sequence, **kw)


def unpack(record: bytes) -> dict:
    return msgpack.unpackb(record, raw=False)


def repack(record: bytes, **changes: object) -> bytes:
    return msgpack.packb({**unpack(record), **changes}, use_bin_type=True)


def reseal(records: list[bytes]) -> list[bytes]:
    """Recompute the end record's checksum, as a buggy or hostile writer would."""
    digest = hashlib.sha256(b"".join(records[:-1])).hexdigest()
    return [*records[:-1], repack(records[-1], sha256=digest)]


def set_count(records: list[bytes], chunk: int, value: int) -> list[bytes]:
    """Replace the first count of chunk ``chunk`` (record chunk + 1)."""
    rec = unpack(records[chunk + 1])
    counts = np.frombuffer(rec["counts"], dtype="<i8").copy()
    counts[0] = value
    out = list(records)
    out[chunk + 1] = repack(records[chunk + 1], counts=counts.tobytes())
    return out


@pytest.fixture(scope="module")
def release() -> Release:
    return make_release()


@pytest.fixture(scope="module")
def records(release: Release) -> list[bytes]:
    out = encode(release)
    assert len(out) >= 6, "the fixture must span several chunks"
    return out


# ---- round trip and layout -----------------------------------------------------------------


def test_round_trip_single_chunk(release: Release) -> None:
    records = encode_release(release, run_id="run-a", partition=0, sequence=0)
    assert len(records) == 3  # header, one chunk, end at the default 256 kB
    back = decode_release(records)
    assert back == release
    assert back.leaf_counts.dtype == np.int64
    np.testing.assert_array_equal(back.points, release.points)


def test_round_trip_multi_chunk(release: Release, records: list[bytes]) -> None:
    assert unpack(records[0])["n_chunks"] == len(records) - 2 >= 4
    assert all(len(r) <= SMALL_CHUNKS for r in records)
    assert decode_release(records) == release
    assert decode_release(iter(records)) == release  # any iterable, read once


@pytest.mark.parametrize(("t", "depth"), [(0, 4), (5, 0), (1, 1), (3, 2), (50, 12)])
def test_round_trip_edge_shapes(t: int, depth: int) -> None:
    release = make_release(t=t, depth=depth, seed=t + depth)
    records = encode(release)
    assert decode_release(records) == release
    if t == 0:
        assert len(records) == 2 and unpack(records[0])["n_chunks"] == 0


def test_header_chunk_end_layout(release: Release, records: list[bytes]) -> None:
    header, *chunks, end = (unpack(r) for r in records)
    assert list(header) == [
        "kind", "format", "run_id", "partition", "sequence", "t", "depth", "d", "metadata",
        "placement_seed", "n_chunks", "leaf_encoding",
    ]  # fmt: skip
    assert header["kind"] == "header" and header["format"] == 1
    assert (header["run_id"], header["partition"], header["sequence"]) == ("run-a", 1, 3)
    assert (header["t"], header["depth"], header["d"]) == (1000, 8, 2)
    assert header["metadata"] == METADATA and header["placement_seed"] == bytes(range(32))
    assert header["leaf_encoding"] == "sparse" and header["n_chunks"] == len(chunks)
    assert [c["index"] for c in chunks] == list(range(len(chunks)))
    assert all(c["kind"] == "chunk" and c["sequence"] == 3 for c in chunks)
    cells = np.concatenate([np.frombuffer(c["cells"], dtype="<u4") for c in chunks])
    counts = np.concatenate([np.frombuffer(c["counts"], dtype="<i8") for c in chunks])
    np.testing.assert_array_equal(cells, np.flatnonzero(release.leaf_counts))
    np.testing.assert_array_equal(counts, release.leaf_counts[release.leaf_counts > 0])
    assert end["kind"] == "end" and end["n_chunks"] == len(chunks)
    assert end["sha256"] == hashlib.sha256(b"".join(records[:-1])).hexdigest()


def test_cell_width_follows_depth() -> None:
    release = make_release(t=4, depth=2)
    assert len(unpack(encode(release)[1])["cells"]) == 4 * np.count_nonzero(release.leaf_counts)
    # a release deeper than 32 cannot be held densely here: check the rule itself
    assert _cell_dtype(32) == np.dtype("<u4") and _cell_dtype(33) == np.dtype("<u8")


def test_records_validate_against_the_json_schema(records: list[bytes]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((SCHEMAS / "release.v1.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)

    def json_view(value: object) -> object:
        if isinstance(value, bytes):
            return base64.b64encode(value).decode("ascii")
        if isinstance(value, dict):
            return {k: json_view(v) for k, v in value.items()}
        return value

    for record in records:
        validator.validate(json_view(unpack(record)))
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(json_view({**unpack(records[0]), "format": 2}))


# ---- determinism ---------------------------------------------------------------------------


def test_same_release_gives_byte_identical_records(release: Release) -> None:
    again = Release(
        t=release.t,
        depth=release.depth,
        leaf_counts=release.leaf_counts.copy(),
        metadata=dict(reversed(list(METADATA.items()))),  # same metadata, other insertion order
        placement_seed=bytes(range(32)),
    )
    assert encode(release) == encode(again)
    assert encode(release) != encode(release, sequence=4)


def test_metadata_is_canonical(release: Release) -> None:
    meta = {**METADATA, "schedule_params": (1, np.int64(2), np.float64(0.5)), "nested": {"b": 1}}
    r = Release(release.t, release.depth, release.leaf_counts, meta, release.placement_seed)
    back = decode_release(encode(r))
    assert back.metadata["schedule_params"] == [1, 2, 0.5]  # tuples travel as lists
    assert back.metadata["nested"] == {"b": 1}


# ---- the writer refuses invalid input ------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"run_id": ""}, "run_id"),
        ({"partition": -1}, "partition"),
        ({"sequence": 1.5}, "sequence"),
        ({"max_chunk_bytes": 0}, "max_chunk_bytes"),
        ({"max_chunk_bytes": 60}, r"max_chunk_bytes \(60\) must leave room"),
        ({"max_chunk_bytes": 180}, "record 0 .* must fit in max_chunk_bytes"),
    ],
)
def test_encode_refuses_bad_arguments(release: Release, kwargs: dict, match: str) -> None:
    args = {"run_id": "r", "partition": 0, "sequence": 0, **kwargs}
    with pytest.raises(ConfigError, match=match):
        encode_release(release, **args)


def test_encode_refuses_inconsistent_release(release: Release) -> None:
    counts = release.leaf_counts.copy()
    counts[0] += 1
    bad = Release(release.t, release.depth, counts, dict(METADATA), release.placement_seed)
    with pytest.raises(ConfigError, match=r"sum to t \(1000\)"):
        encode(bad)
    short = Release(release.t, release.depth, counts[:-1], dict(METADATA))
    with pytest.raises(ConfigError, match="must be 2\\^depth = 256 integers"):
        encode(short)
    no_d = Release(release.t, release.depth, release.leaf_counts, {"epsilon": 1.0})
    with pytest.raises(ConfigError, match="metadata 'd'"):
        encode(no_d)
    bad_key = Release(release.t, release.depth, release.leaf_counts, {"d": 2, 7: "x"})
    with pytest.raises(ConfigError, match=r"key \(7\) must be a str"):
        encode(bad_key)


# ---- the reader rejects every broken release -----------------------------------------------


def _swap(records: list[bytes], i: int, j: int) -> list[bytes]:
    out = list(records)
    out[i], out[j] = out[j], out[i]
    return out


def _other_sequence(records: list[bytes]) -> list[bytes]:
    other = encode(make_release(), sequence=4)
    return [*records[:2], other[2], *records[3:]]


def _cell_beyond_depth(records: list[bytes]) -> list[bytes]:
    rec = unpack(records[-2])
    cells = np.frombuffer(rec["cells"], dtype="<u4").copy()
    cells[-1] = 256
    return reseal([*records[:-2], repack(records[-2], cells=cells.tobytes()), records[-1]])


def _cell_repeated(records: list[bytes]) -> list[bytes]:
    first = np.frombuffer(unpack(records[1])["cells"], dtype="<u4")
    rec = unpack(records[2])
    cells = np.frombuffer(rec["cells"], dtype="<u4").copy()
    cells[0] = first[-1]
    return reseal([records[0], records[1], repack(records[2], cells=cells.tobytes()), *records[3:]])


BROKEN: dict[str, tuple[Callable[[list[bytes]], list[bytes]], str]] = {
    "empty": (lambda r: [], "no records"),
    "no header": (lambda r: r[1:], "must be the header"),
    "truncated after header": (lambda r: r[:1], "truncated"),
    "truncated mid-chunks": (lambda r: r[:3], r"after 2 of \d+ chunks: the release is truncated"),
    "missing end": (lambda r: r[:-1], "truncated"),
    "missing chunk": (lambda r: [*r[:2], *r[3:]], "chunk 1 is missing or out of order"),
    "missing last chunk": (lambda r: [*r[:-2], r[-1]], "chunks are missing"),
    "duplicated chunk": (lambda r: [*r[:3], r[2], *r[3:]], "chunk 1 appears twice"),
    "reordered chunks": (lambda r: _swap(r, 2, 3), "chunk 1 is missing or out of order"),
    "chunk index out of range": (
        lambda r: [r[0], repack(r[1], index=99), *r[2:]],
        r"chunk index \(99\) must be below n_chunks",
    ),
    "tampered count": (lambda r: set_count(r, 1, 1), "sha256 .* must match"),
    "tampered count, resealed": (
        lambda r: reseal(set_count(r, 1, 987_654)),
        r"counts must lie in \[1, t\]",
    ),
    "count moved between leaves, resealed": (
        lambda r: reseal(set_count(set_count(r, 1, 2), 2, 2)),
        r"leaf counts must sum to t \(1000\)",
    ),
    "negative count, resealed": (
        lambda r: reseal(set_count(r, 0, -987_654)),
        "non-negative",
    ),
    "zero count, resealed": (lambda r: reseal(set_count(r, 0, 0)), r"counts must lie in \[1, t\]"),
    "wrong checksum": (
        lambda r: [*r[:-1], repack(r[-1], sha256=hashlib.sha256(b"other").hexdigest())],
        "sha256 .* must match",
    ),
    "tampered header t": (lambda r: [repack(r[0], t=999), *r[1:]], "sha256 .* must match"),
    "tampered header t, resealed": (
        lambda r: reseal([repack(r[0], t=999), *r[1:]]),
        r"counts must lie in \[1, t\]|sum to t",
    ),
    "mixed sequence": (_other_sequence, "records of different releases are mixed"),
    "cell beyond 2^depth": (_cell_beyond_depth, r"cell 256 must be below 2\^depth \(256\)"),
    "cell repeated across chunks": (_cell_repeated, "cells must increase strictly"),
    "second header": (lambda r: [*r[:2], r[0], *r[2:]], "second header"),
    "record after end": (lambda r: [*r, r[1]], "no record may follow the end record"),
    "garbage record": (lambda r: [*r[:2], b"\xc1garbage", *r[2:]], "cannot be decoded"),
    "not bytes": (lambda r: [*r[:2], "chunk", *r[2:]], r"record 2 \(str\) must be bytes"),
    "unknown kind": (lambda r: [*r[:2], repack(r[2], kind="patch")], "`kind` .* must be"),
    "extra field": (lambda r: [r[0], repack(r[1], note="x"), *r[2:]], r"unknown \['note'\]"),
    "future format": (lambda r: [repack(r[0], format=2), *r[1:]], r"`format` \(2\) must be 1"),
    "other leaf encoding": (
        lambda r: [repack(r[0], leaf_encoding="rle"), *r[1:]],
        "leaf_encoding",
    ),
    "header d disagrees with metadata": (lambda r: [repack(r[0], d=3), *r[1:]], "'d' equals"),
    "end n_chunks disagrees": (
        lambda r: [*r[:-1], repack(r[-1], n_chunks=1)],
        "chunks are missing",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_release_is_rejected(records: list[bytes], case: str) -> None:
    breaker, match = BROKEN[case]
    with pytest.raises(ReleaseIncompleteError, match=match) as info:
        decode_release(breaker(list(records)))
    assert "987654" not in str(info.value)  # privacy: a count is never named
    assert info.value.reason in REASONS  # a stable code (the conformance vectors pin which)


def test_untouched_records_still_decode(records: list[bytes], release: Release) -> None:
    # guards the cases above: the breakers, not the fixture, cause the errors
    assert decode_release(reseal(list(records))) == release


def test_depth_beyond_max_depth_is_refused(release: Release) -> None:
    with pytest.raises(ReleaseIncompleteError, match=r"raise max_depth"):
        decode_release(encode(release), max_depth=7)
    assert decode_release(encode(release), max_depth=8) == release


def test_error_is_dpsynth_and_value_error() -> None:
    assert issubclass(ReleaseIncompleteError, DpsynthError)
    assert issubclass(ReleaseIncompleteError, ValueError)


def test_release_key_of_any_record(records: list[bytes]) -> None:
    assert {release_key(r) for r in records} == {ReleaseKey("run-a", 1, 3)}


# ---- files -------------------------------------------------------------------------------


def test_file_round_trip(tmp_path: Path, release: Release, records: list[bytes]) -> None:
    path = tmp_path / "release-000003.bin"
    write_release_file(path, records)
    data = path.read_bytes()
    assert int.from_bytes(data[:4], "big") == len(records[0])
    assert data[4 : 4 + len(records[0])] == records[0]
    assert len(data) == sum(4 + len(r) for r in records)
    assert read_release_records(path) == records
    assert read_release_file(path) == release
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


def test_truncated_file_is_rejected(tmp_path: Path, records: list[bytes]) -> None:
    path = tmp_path / "r.bin"
    write_release_file(path, records)
    data = path.read_bytes()
    for cut in (len(data) - 1, len(data) - len(records[-1]) - 2):
        path.write_bytes(data[:cut])
        with pytest.raises(ReleaseIncompleteError, match="truncated"):
            read_release_file(path)
    path.write_bytes(data[: len(data) - len(records[-1]) - 4])  # cut exactly before the end
    with pytest.raises(ReleaseIncompleteError, match="truncated"):
        read_release_file(path)


# ---- assembler ---------------------------------------------------------------------------


def _interleave(streams: list[list[bytes]], seed: int) -> list[bytes]:
    """Merge several record lists at random, keeping each list's own order (a topic's view)."""
    rng = np.random.default_rng(seed)
    queues = [list(s) for s in streams]
    out = []
    while any(queues):
        live = [q for q in queues if q]
        out.append(live[rng.integers(len(live))].pop(0))
    return out


@pytest.fixture(scope="module")
def three() -> list[tuple[ReleaseKey, Release, list[bytes]]]:
    out = []
    for i, (partition, sequence) in enumerate([(0, 5), (1, 5), (0, 6)]):
        rel = make_release(t=300 + i, seed=10 + i)
        recs = encode_release(
            rel, run_id="run-a", partition=partition, sequence=sequence, max_chunk_bytes=400
        )
        out.append((ReleaseKey("run-a", partition, sequence), rel, recs))
    return out


def test_assembler_handles_interleaving(three: list) -> None:
    for seed in range(5):
        asm = ReleaseAssembler()
        got = [
            x for r in _interleave([recs for _, _, recs in three], seed) if (x := asm.add_keyed(r))
        ]
        assert sorted(k for k, _ in got) == sorted(k for k, _, _ in three)
        for key, rel, _ in three:
            assert dict(got)[key] == rel
        assert asm.pending == ()


def test_assembler_returns_each_release_once(three: list) -> None:
    asm = ReleaseAssembler()
    (_, rel, recs), (_, rel2, recs2) = three[0], three[1]
    outputs = [asm.add(r) for r in recs]
    assert outputs[:-1] == [None] * (len(recs) - 1) and outputs[-1] == rel
    # a retried release is byte-identical: dropped silently, record by record
    assert [asm.add(r) for r in recs] == [None] * len(recs)
    assert [asm.add(r) for r in recs[2:]] == [None] * (len(recs) - 2)
    assert asm.pending == ()
    assert [asm.add(r) for r in recs2][-1] == rel2


def test_assembler_tolerates_byte_identical_duplicates_while_pending(three: list) -> None:
    _, rel, recs = three[0]
    asm = ReleaseAssembler()
    # at-least-once: a record delivered twice, and a retry that restarts from the header
    stream = [recs[0], recs[1], recs[1], recs[2], recs[0], recs[1], *recs[2:]]
    outputs = [asm.add(r) for r in stream]
    assert [o for o in outputs if o is not None] == [rel]


def test_same_sequence_of_another_run_is_not_a_duplicate(three: list) -> None:
    _, rel, recs = three[0]
    other = encode_release(rel, run_id="run-b", partition=0, sequence=5, max_chunk_bytes=400)
    asm = ReleaseAssembler()
    assert [asm.add(r) for r in recs][-1] == rel
    assert [asm.add(r) for r in other][-1] == rel


def test_assembler_rejects_a_conflicting_chunk_then_accepts_a_clean_retry(three: list) -> None:
    key, rel, recs = three[0]
    asm = ReleaseAssembler()
    asm.add(recs[0])
    asm.add(recs[1])
    with pytest.raises(ReleaseIncompleteError, match="two different versions of chunk 0"):
        asm.add(set_count(recs, 0, 1)[1])
    assert asm.pending == ()
    assert [asm.add(r) for r in recs][-1] == rel


def test_assembler_rejects_a_conflicting_header(three: list) -> None:
    key, rel, recs = three[0]
    asm = ReleaseAssembler()
    asm.add(recs[0])
    with pytest.raises(ReleaseIncompleteError, match="two different headers"):
        asm.add(repack(recs[0], t=1))
    assert asm.pending == ()


def test_assembler_rejects_missing_chunk_and_bad_checksum(three: list) -> None:
    key, rel, recs = three[0]
    asm = ReleaseAssembler()
    for r in [*recs[:2], *recs[3:-1]]:
        assert asm.add(r) is None
    with pytest.raises(ReleaseIncompleteError, match=r"release .*sequence=5\).*chunk 1 is missing"):
        asm.add(recs[-1])
    tampered = set_count(recs, 1, 1)
    for r in tampered[:-1]:
        asm.add(r)
    with pytest.raises(ReleaseIncompleteError, match="sha256"):
        asm.add(tampered[-1])
    # a corrupt release is not marked assembled: its clean retry still comes through
    assert [asm.add(r) for r in recs][-1] == rel


def test_assembler_rejects_orphans_and_garbage(three: list) -> None:
    _, _, recs = three[0]
    asm = ReleaseAssembler()
    with pytest.raises(ReleaseIncompleteError, match="without its header"):
        asm.add(recs[1])
    with pytest.raises(ReleaseIncompleteError, match="without its header"):
        asm.add(recs[-1])
    with pytest.raises(ReleaseIncompleteError, match="cannot be decoded"):
        asm.add(b"\xc1")
    assert asm.add(recs[0]) is None
    with pytest.raises(ReleaseIncompleteError, match="chunk index"):
        asm.add(repack(recs[1], index=-1))
    assert asm.pending == ()


def test_assembler_evicts_beyond_max_pending(three: list) -> None:
    asm = ReleaseAssembler(max_pending=2)
    asm.add(three[0][2][0])
    asm.add(three[1][2][0])
    with pytest.raises(ReleaseIncompleteError, match=r"sequence=5\) evicted incomplete"):
        asm.add(three[2][2][0])
    assert asm.pending == (three[1][0], three[2][0])


def test_assembler_forgets_only_the_distant_past() -> None:
    rel = make_release(t=10, depth=2)
    asm = ReleaseAssembler(remember=2)
    for sequence in range(8):
        recs = encode_release(rel, run_id="r", partition=0, sequence=sequence)
        assert [asm.add(r) for r in recs][-1] == rel
    for sequence in range(8):  # every replay is dropped, remembered or below the floor
        recs = encode_release(rel, run_id="r", partition=0, sequence=sequence)
        assert [asm.add(r) for r in recs] == [None] * len(recs)


def test_assembler_refuses_bad_settings() -> None:
    with pytest.raises(ConfigError, match="max_pending"):
        ReleaseAssembler(max_pending=0)


def test_a_release_with_its_occupied_leaves_encodes_to_the_same_bytes():
    """The synthesizer hands its releases' sparse counts along (issue 15): same bytes."""
    import dataclasses

    from dpsynth.online.synthesizer import OnlineSynthesizer

    synth = OnlineSynthesizer(2, 1.0, bytes(32), 500, max_depth=12)
    releases = list(synth.extend(np.random.default_rng(3).random((3000, 2)) ** 3))
    assert releases and all(r.occupied is not None for r in releases)
    for r in releases:
        dense = dataclasses.replace(r, occupied=None)
        key = {"run_id": "r", "partition": 0, "sequence": int(r.metadata["sequence"])}
        assert encode_release(r, **key) == encode_release(dense, **key)
        cells, values = r.occupied
        assert np.array_equal(np.flatnonzero(r.leaf_counts), cells)
        assert np.array_equal(r.leaf_counts[cells], values)
    bad = dataclasses.replace(releases[-1], occupied=(cells[::-1], values[::-1]))
    with pytest.raises(ConfigError, match="ascending"):
        encode_release(bad, run_id="r", partition=0, sequence=1)
