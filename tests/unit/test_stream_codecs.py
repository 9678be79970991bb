"""Raw-event decoding and dead-letter records: reasons name the field and rule, never a value."""

from __future__ import annotations

import hashlib
import hmac
import math
import pickle

import msgpack
import numpy as np
import pytest

from dpsynth.keys import NoiseKey
from dpsynth.noise.keyed import encode_context
from dpsynth.schema import Column, Schema
from dpsynth.stream.codecs import (
    DEAD_LETTER_CONTEXT,
    MAX_REJECTS_LISTED,
    DeadLetterHasher,
    dead_letter_digest,
    dead_letter_key,
    decode_dead_letter,
    decode_event,
    encode_dead_letter,
    release_record_key,
    split_batch,
)

SCHEMA = Schema((Column("x", 0, 10), Column("y", -1, 1)))
SECRET = 31337.4242  # a distinctive value that must never show up in a reason
KEY = bytes(range(32))  # a test key (not the demo key: the derivation must use the key given)
HASHER = DeadLetterHasher(NoiseKey(KEY, source="test"))


def pack(obj):
    return msgpack.packb(obj, use_bin_type=True)


@pytest.mark.parametrize(("raw", "fragment"), [
    (b"\xc1", "not valid msgpack (FormatError)"),
    (pack({"x": 1}) + b"\x01", "not valid msgpack (ExtraData)"),
    (b"\x92\x01", "not valid msgpack (ValueError)"),
    (b"\xa3\xff\xfe\xfd", "not valid msgpack (UnicodeDecodeError)"),
    (pack(SECRET), "not a float"),
    (pack("text"), "not a string"),
    (pack(None), "not nil"),
    (None, "no value (a tombstone)"),
])
def test_unusable_messages_get_a_reason_without_the_value(raw, fragment):
    records, reason = decode_event(raw)
    assert records is None and fragment in reason
    assert str(SECRET) not in reason and "31337" not in reason


def test_a_map_is_one_record_and_a_list_is_a_batch():
    assert decode_event(pack({"x": 1.5, "y": 0})) == ([{"x": 1.5, "y": 0}], None)
    assert decode_event(pack([{"x": 1}, {"x": 2}])) == ([{"x": 1}, {"x": 2}], None)
    assert decode_event(pack([])) == ([], None)


def test_split_batch_checks_all_records_at_once_and_maps_rejects_to_messages():
    values = [
        pack([{"x": 5, "y": 0}, {"x": 20, "y": 0.5}]),    # 0: valid, the second clipped
        b"\xc1",                                          # 1: undecodable
        pack([{"x": 1, "y": 0}, {"x": SECRET, "y": math.nan}, {"x": 2}]),  # 2: two bad of three
        pack({"x": "7", "y": 0}),                         # 3: wrong type
        pack({"x": 0, "y": 1, "z": 3}),                   # 4: extra field ignored
        pack(7),                                          # 5: not a record
    ]
    result = split_batch(SCHEMA, values)
    np.testing.assert_allclose(result.points, [[0.5, 0.5], [1.0, 0.75], [0.1, 0.5], [0.0, 1.0]])
    assert result.clip_report.total == 1
    assert result.valid_per_message.tolist() == [2, 0, 1, 0, 1, 0]
    assert result.records_per_message.tolist() == [2, 0, 3, 1, 1, 0]
    assert result.rejects[1][0][0] == -1
    assert result.rejects[2] == [
        (1, "field 'y' must be finite (NaN and ±inf are rejected)"),
        (2, "field 'y' is missing"),
    ]
    assert result.rejects[3] == [(0, "field 'x' must be a number, not str")]
    assert result.rejects[5][0][0] == -1 and "must be a msgpack map" in result.rejects[5][0][1]
    assert set(result.rejects) == {1, 2, 3, 5}
    for rejects in result.rejects.values():
        for _, reason in rejects:
            assert "31337" not in reason


def test_an_empty_batch_has_no_points():
    result = split_batch(SCHEMA, [pack([])])
    assert result.points.shape == (0, 2) and not result.rejects


def _subkey(key: bytes) -> bytes:
    """The documented derivation: HMAC-SHA256(key, encode_context(DEAD_LETTER_CONTEXT))."""
    return hmac.new(key, encode_context(DEAD_LETTER_CONTEXT), hashlib.sha256).digest()


def _letter(value: bytes | None, hasher: DeadLetterHasher = HASHER, **kw) -> bytes:
    args = {"topic": "raw", "partition": 2, "offset": 41, "timestamp_ms": 1700000000000,
            "rejects": [(1, "field 'x' must be finite")], "n_records": 2} | kw
    return encode_dead_letter(value=value, hasher=hasher, **args)


def test_dead_letter_round_trip_names_the_message_without_its_value():
    raw = pack([{"x": 1, "y": 0}, {"x": math.inf, "y": 0}])
    decoded = decode_dead_letter(_letter(raw))
    assert decoded == {
        "format": 3, "topic": "raw", "partition": 2, "offset": 41,
        "timestamp_ms": 1700000000000, "reason": "field 'x' must be finite",
        "rejects": [[1, "field 'x' must be finite"]], "n_rejects": 1, "n_records": 2,
        "length": len(raw), "hmac_sha256": hmac.new(_subkey(KEY), raw, "sha256").hexdigest(),
        "key_fingerprint": NoiseKey(KEY).fingerprint, "prefix": b"",
    }
    with pytest.raises(ValueError, match="not a dpsynth dead-letter record of format 2 or 3"):
        decode_dead_letter(pack({"format": 1, "raw": raw}))


@pytest.mark.parametrize("raw", [pack({"x": 0.5}), pack({"x": 0}), b"\xc1", pack([])])
def test_a_dead_letter_holds_no_unsalted_hash_nor_the_key_or_its_subkey(raw):
    """Issue 44: a reader of the topic cannot test guesses of a short message against an
    unsalted SHA-256, and no byte of the key or the subkey is written."""
    letter = _letter(raw)
    plain, subkey = hashlib.sha256(raw), _subkey(KEY)
    for secret in (plain.hexdigest().encode(), plain.digest(), KEY, KEY.hex().encode(), subkey,
                   subkey.hex().encode()):
        assert secret not in letter
    for text in (plain.hexdigest(), KEY.hex(), subkey.hex()):  # in any case, in any field
        assert text.upper().encode() not in letter
    assert set(decode_dead_letter(letter)) >= {"hmac_sha256", "key_fingerprint"}
    assert "sha256" not in decode_dead_letter(letter)


def test_the_keyed_digest_depends_on_the_key_and_the_operator_can_recompute_it(monkeypatch):
    raw = pack({"x": 0.5})
    other = DeadLetterHasher(NoiseKey(bytes(range(1, 33)), source="test"))
    mine, theirs = decode_dead_letter(_letter(raw)), decode_dead_letter(_letter(raw, other))
    assert mine["hmac_sha256"] != theirs["hmac_sha256"]
    assert mine["key_fingerprint"] != theirs["key_fingerprint"]
    assert mine["hmac_sha256"] == HASHER.digest(raw) == dead_letter_digest(raw, NoiseKey(KEY))
    assert HASHER.digest(raw) != HASHER.digest(raw + b"\x00")
    monkeypatch.setenv("DPSYNTH_NOISE_KEY", KEY.hex())  # the environment, as the worker reads it
    monkeypatch.delenv("DPSYNTH_NOISE_KEY_FILE", raising=False)
    assert dead_letter_digest(raw) == mine["hmac_sha256"]
    assert "redacted" in repr(HASHER) and KEY.hex() not in repr(HASHER)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(HASHER)


def test_format_2_letters_still_decode():
    """Lenient reading: a topic keeps the letters written before issue 44."""
    old = {"format": 2, "topic": "raw", "partition": 0, "offset": 1, "timestamp_ms": None,
           "reason": "r", "rejects": [[-1, "r"]], "n_rejects": 1, "n_records": 0, "length": 1,
           "sha256": hashlib.sha256(b"\xc1").hexdigest(), "prefix": b""}
    assert decode_dead_letter(pack(old)) == old


@pytest.mark.parametrize("size", [0, 1, 2**20, 50 * 2**20])
def test_dead_letters_are_bounded_whatever_the_message(size):
    raw = bytes(range(256)) * (size // 256) + b"\x01" * (size % 256)
    rejects = [(i, "field 'x' is missing " + "z" * 10_000) for i in range(100_000)]
    letter = encode_dead_letter(value=raw, topic="t" * 249, partition=0, offset=2**62,
                                timestamp_ms=None, rejects=rejects, n_records=100_000,
                                hasher=HASHER, prefix_bytes=4096)
    assert len(letter) < 64 * 1024 + 4096
    decoded = decode_dead_letter(letter)
    assert decoded["length"] == size and decoded["prefix"] == raw[:4096]
    assert decoded["n_rejects"] == 100_000 and len(decoded["rejects"]) == MAX_REJECTS_LISTED


def test_a_tombstone_dead_letter_has_no_length_or_digest():
    decoded = decode_dead_letter(_letter(None, rejects=[(-1, "message has no value")],
                                         n_records=0, prefix_bytes=10))
    assert decoded["length"] is None and decoded["hmac_sha256"] is None
    assert decoded["prefix"] is None


def test_keys():
    assert dead_letter_key("raw", 2, 41) == b"raw/2/41"
    assert release_record_key("run", 0, 5) == b"run/0/5"
