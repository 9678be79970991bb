"""The release-format conformance vectors (schemas/conformance/vectors.json) and the Python reader.

The committed file must equal a fresh build (``python -m tests.support.conformance``), and the
Python reader must agree with every vector: valid releases decode to the listed leaves and
points bit for bit, invalid ones are refused with the listed reason code, assembler streams
give the listed outcome record by record. The placement is also recomputed here from the words
of schemas/README.md alone (a pure-Python ChaCha20 and the steps as written), so the
specification, not only the code, is what the vectors pin. clients/java runs the same file.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import struct
from functools import cache
from typing import Any

import numpy as np
import pytest

from dpsynth.release import (
    ReleaseAssembler,
    ReleaseIncompleteError,
    decode_release,
    decode_tabular_release,
)
from dpsynth.release.framing import REASONS
from dpsynth.schema import Schema
from tests.support import conformance


@cache
def vectors() -> dict[str, Any]:
    return json.loads(conformance.VECTORS.read_text())


def _names(section: str) -> list[str]:
    return [v["name"] for v in vectors()[section]]


def _vector(section: str, name: str) -> dict[str, Any]:
    return next(v for v in vectors()[section] if v["name"] == name)


def _records(vector: dict[str, Any]) -> list[bytes]:
    return [base64.b64decode(r) for r in vector["records"]]


def _bits(values: np.ndarray) -> list[str]:
    flat = np.ascontiguousarray(values, dtype="<f8").reshape(-1).view("<u8")
    return [format(int(v), "016x") for v in flat]


def test_committed_vectors_equal_a_fresh_build() -> None:
    assert conformance.build() == conformance.VECTORS.read_text(), (
        "schemas/conformance/vectors.json is stale: a change of the release format or of "
        "placement bumps the format version; regenerate with `python -m tests.support.conformance`"
    )


def test_vectors_stay_small_and_cover_every_reason() -> None:
    assert conformance.VECTORS.stat().st_size < 1_000_000
    used = {v["reason"] for v in vectors()["invalid"]}
    used |= {o["reject"] for s in vectors()["streams"] for o in s["expect"] if o and "reject" in o}
    assert used == set(REASONS)
    spec = (conformance.VECTORS.parents[1] / "README.md").read_text()
    assert all(f"`{code}`" in spec for code in REASONS), "every reason code is in schemas/"
    d_and_notions = {(v["expect"]["d"], v["expect"]["metadata"].get("neighbours"))
                     for v in vectors()["points"]}
    assert {(d, n) for d in (1, 2, 3) for n in ("replace", "add_remove")} <= d_and_notions


@pytest.mark.parametrize("name", _names("points"))
def test_point_release_decodes_to_its_leaves_and_points(name: str) -> None:
    vector = _vector("points", name)
    expect = vector["expect"]
    release = decode_release(_records(vector))
    cells = np.flatnonzero(release.leaf_counts)
    assert (release.t, release.depth, release.d) == (expect["t"], expect["depth"], expect["d"])
    assert release.metadata == expect["metadata"]
    assert release.placement_seed.hex() == expect["placement_seed"]
    assert cells.tolist() == expect["cells"]
    assert release.leaf_counts[cells].tolist() == expect["counts"]
    assert _bits(release.points) == expect["points"]
    if "record_schema" in expect:
        units = Schema.from_dict(expect["record_schema"]).from_unit(release.points)
        assert _bits(units) == expect["points_in_units"]


@pytest.mark.parametrize("name", _names("tabular"))
def test_tabular_release_decodes_to_its_rows(name: str) -> None:
    vector = _vector("tabular", name)
    expect = vector["expect"]
    release = decode_tabular_release(_records(vector))
    assert (release.sequence, release.step) == (expect["sequence"], expect["step"])
    assert release.records.shape == (expect["n_rows"], expect["p"])
    assert release.records.tolist() == expect["rows"]
    assert release.metadata == expect["metadata"]


@pytest.mark.parametrize("name", _names("invalid"))
def test_invalid_records_are_refused_with_their_reason(name: str) -> None:
    vector = _vector("invalid", name)
    decode = decode_release if vector["decoder"] == "points" else decode_tabular_release
    options = {"max_depth": vector["max_depth"]} if "max_depth" in vector else {}
    with pytest.raises(ReleaseIncompleteError) as info:
        decode(_records(vector), **options)
    assert info.value.reason == vector["reason"], str(info.value)


@pytest.mark.parametrize("name", _names("streams"))
def test_assembler_stream_gives_the_listed_outcomes(name: str) -> None:
    vector = _vector("streams", name)
    assembler = ReleaseAssembler(**vector["assembler"])
    for position, (record, expected) in enumerate(
            zip(_records(vector), vector["expect"], strict=True)):
        try:
            got = assembler.add_keyed(record)
        except ReleaseIncompleteError as e:
            assert expected == {"reject": e.reason}, f"record {position}: {e}"
            continue
        if expected is None:
            assert got is None, f"record {position}"
            continue
        assert got is not None, f"record {position}: expected {expected}"
        reference = _vector("points", expected["release"])
        assert got[1] == decode_release(_records(reference))
        assert got[0] == (reference["expect"]["run_id"], reference["expect"]["partition"],
                          reference["expect"]["sequence"])


# ---- placement from the words of the specification ---------------------------------------


def _chacha20_block(key: bytes, counter: int, nonce: int) -> list[int]:
    """ChaCha20 (Bernstein's layout: 64-bit counter in words 12-13, 64-bit nonce in 14-15)."""
    mask = 0xFFFFFFFF

    def rotl(v: int, n: int) -> int:
        return ((v << n) | (v >> (32 - n))) & mask

    def quarter(s: list[int], a: int, b: int, c: int, d: int) -> None:
        s[a] = (s[a] + s[b]) & mask
        s[d] = rotl(s[d] ^ s[a], 16)
        s[c] = (s[c] + s[d]) & mask
        s[b] = rotl(s[b] ^ s[c], 12)
        s[a] = (s[a] + s[b]) & mask
        s[d] = rotl(s[d] ^ s[a], 8)
        s[c] = (s[c] + s[d]) & mask
        s[b] = rotl(s[b] ^ s[c], 7)

    state = [*struct.unpack("<4I", b"expand 32-byte k"), *struct.unpack("<8I", key),
             counter & mask, counter >> 32, nonce & mask, nonce >> 32]
    x = list(state)
    for _ in range(10):
        for a, b, c, d in ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
                           (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14)):
            quarter(x, a, b, c, d)
    return [(x[i] + state[i]) & mask for i in range(16)]


def _subkey(seed: bytes, depth: int) -> bytes:
    depth_text = str(depth).encode()
    context = (b"dpsynth.noise.v1" + b"s" + (5).to_bytes(4, "big") + b"place"
               + b"i" + len(depth_text).to_bytes(4, "big") + depth_text)
    return hmac.new(seed, context, hashlib.sha256).digest()


def _spec_points(expect: dict[str, Any]) -> list[float]:
    """Release.points as schemas/README.md "Placement" states it, one point at a time."""
    d, depth = expect["d"], expect["depth"]
    seed = bytes.fromhex(expect["placement_seed"])
    key = _subkey(seed, depth)
    centre = expect["metadata"].get("placement", "uniform") == "centre"
    below_one = np.nextafter(1.0, 0.0)
    out = []
    for cell, count in zip(expect["cells"], expect["counts"], strict=True):
        grid = [0] * d
        for k in range(depth):
            grid[k % d] = grid[k % d] << 1 | (cell >> (depth - 1 - k)) & 1
        sides = [1.0 / float(1 << ((depth - i + d - 1) // d if depth > i else 0))
                 for i in range(d)]
        lower = [float(g) * s for g, s in zip(grid, sides, strict=True)]
        upper = [lo + s for lo, s in zip(lower, sides, strict=True)]
        for k in range(count):
            for j in range(d):
                if centre:
                    out.append((lower[j] + upper[j]) / 2)
                    continue
                w = _chacha20_block(key, (k * d + j) << 8, cell)
                u = float(((w[0] >> 11) << 32 | w[1]) + 1) / 9007199254740992.0
                out.append(lower[j] + min(u, below_one) * (upper[j] - lower[j]))
    return out


@pytest.mark.parametrize("name", [n for n in _names("points") if "tiny" not in n])
def test_the_specification_alone_reproduces_the_points(name: str) -> None:
    expect = _vector("points", name)["expect"]
    assert _bits(np.array(_spec_points(expect))) == expect["points"]


@pytest.mark.parametrize("index", range(len(vectors()["keystream"])))
def test_keystream_vectors_follow_the_specification(index: int) -> None:
    v = vectors()["keystream"][index]
    seed, depth = bytes.fromhex(v["placement_seed"]), v["depth"]
    assert _subkey(seed, depth).hex() == v["subkey"]
    assert hmac.new(seed, bytes.fromhex(v["context"]), hashlib.sha256).hexdigest() == v["subkey"]
    block = _chacha20_block(bytes.fromhex(v["subkey"]), int(v["counter"]), int(v["stream"]))
    assert [format(w, "08x") for w in block] == v["block"]
    raw = ((block[0] >> 11) << 32 | block[1]) + 1
    assert str(raw) == v["uniform53"]
    assert _bits(np.array([raw / 2.0**53])) == [v["u"]]


def test_pure_chacha20_matches_rfc_8439() -> None:
    """RFC 8439 §2.3.2: key 00..1f, nonce 000000090000004a00000000, counter 1 — in this
    layout counter word 13 and the nonce words carry the RFC nonce."""
    key = bytes(range(32))
    nonce = bytes.fromhex("000000090000004a00000000")
    counter = 1 | int.from_bytes(nonce[:4], "little") << 32
    block = _chacha20_block(key, counter, int.from_bytes(nonce[4:], "little"))
    assert block[:4] == [0xE4E7F110, 0x15593BD1, 0x1FDD0F50, 0xC47120A3]
