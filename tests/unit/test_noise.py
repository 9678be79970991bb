"""Unit tests of dpsynth.noise and its ChaCha20 kernel: derivation, determinism, hygiene.

Fast (< 5 s once numba's on-disk cache is warm). Distribution checks live in
tests/statistical/test_noise_distribution.py.
"""

from __future__ import annotations

import hashlib
import hmac
import pickle
from collections.abc import Iterator
from fractions import Fraction

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from dpsynth.errors import ConfigError
from dpsynth.noise import (
    MAX_EVENT,
    SCALE_DENOMINATOR,
    KeyedNoise,
    _kernels,
    effective_scale,
    encode_context,
    geometric_from_uniform,
)

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
#: A key whose raw bytes and hex spelling are easy to spot in any text.
DISTINCTIVE_KEY = b"TOPSECRET-noise-key-0123456789!!"

U64_MAX = (1 << 64) - 1


@pytest.fixture(scope="module")
def noise() -> KeyedNoise:
    return KeyedNoise(KEY)


# -- reference ChaCha20 (the `cryptography` package, i.e. OpenSSL) ----------------------------


def _key_words(key: bytes) -> np.ndarray:
    return np.frombuffer(key, dtype="<u4").astype(np.uint64)


def _reference_block(key: bytes, counter: int, nonce: int) -> bytes:
    """One 64-byte ChaCha20 keystream block; 16-byte IV = LE64 counter || LE64 nonce."""
    iv = counter.to_bytes(8, "little") + nonce.to_bytes(8, "little")
    encryptor = Cipher(algorithms.ChaCha20(key, iv), mode=None).encryptor()
    return encryptor.update(bytes(64)) + encryptor.finalize()


def _kernel_block(key: bytes, counter: int, nonce: int) -> bytes:
    out = np.zeros(16, dtype=np.uint64)
    _kernels.chacha20_block(_key_words(key), np.uint64(counter), np.uint64(nonce), out)
    assert int(out.max()) <= 0xFFFFFFFF
    return out.astype("<u4").tobytes()


@pytest.mark.parametrize(
    ("counter", "nonce"),
    [
        (0, 0),
        (1, 0),
        (0, 1),
        (255, 7),
        (1 << 8, 12345),
        (0xFFFFFFFF, 0xFFFFFFFF),  # 32-bit carry boundary of both words
        (1 << 32, 1 << 32),
        (MAX_EVENT << 8 | 255, U64_MAX),  # the largest address the samplers use
        (0xDEADBEEFCAFEBABE, 0x0123456789ABCDEF),
        (U64_MAX, U64_MAX),
    ],
)
@pytest.mark.parametrize("key", [KEY, bytes(32), bytes([0xFF]) * 32, DISTINCTIVE_KEY])
def test_chacha20_block_matches_cryptography(key: bytes, counter: int, nonce: int) -> None:
    assert _kernel_block(key, counter, nonce) == _reference_block(key, counter, nonce)


def test_chacha20_block_rfc8439_vector() -> None:
    """RFC 8439 §2.3.2: key 00..1f, nonce 000000090000004a00000000, block count 1.

    In the 64/64 layout the 96-bit nonce's first word is the counter's high word.
    """
    expected = bytes.fromhex(
        "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
        "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e"
    )
    counter = 1 | (0x09000000 << 32)
    nonce = 0x4A000000
    assert _kernel_block(bytes(range(32)), counter, nonce) == expected
    assert _reference_block(bytes(range(32)), counter, nonce) == expected


# -- derivation: HMAC subkey, keystream addressing ----------------------------------------------


def test_subkey_is_hmac_sha256_of_the_context_encoding(noise: KeyedNoise) -> None:
    for ctx in [(), ("isc", 3, 1, "thr"), ("doc",)]:
        digest = hmac.new(KEY, encode_context(ctx), hashlib.sha256).digest()
        assert noise.subkey(ctx).tolist() == _key_words(digest).tolist()


def test_uniform_at_matches_reference_keystream(noise: KeyedNoise) -> None:
    """uniform_at uses the first two words of block (event << 8) of nonce ``stream``."""
    ctx = ("u", 1)
    subkey = hmac.new(KEY, encode_context(ctx), hashlib.sha256).digest()
    streams = [0, 1, 2**32 + 5, U64_MAX]
    events = [0, 9, 2**40, MAX_EVENT]
    got = noise.uniform_at(ctx, np.array(streams, dtype=np.uint64), np.array(events))
    for value, stream, event in zip(got, streams, events, strict=True):
        block = _reference_block(subkey, event << 8, stream)
        w0, w1 = int.from_bytes(block[0:4], "little"), int.from_bytes(block[4:8], "little")
        assert value == (((w0 >> 11) << 32 | w1) + 1) / 2.0**53


class _ReferenceStream:
    """The 32-bit words a sample at (stream, event) may consume, from the reference cipher."""

    def __init__(self, subkey: bytes, stream: int, event: int) -> None:
        self._words = self._generate(subkey, stream, event)

    @staticmethod
    def _generate(subkey: bytes, stream: int, event: int) -> Iterator[int]:
        for block in range(256):
            data = _reference_block(subkey, event << 8 | block, stream)
            for i in range(16):
                yield int.from_bytes(data[4 * i : 4 * i + 4], "little")

    def word(self) -> int:
        return next(self._words)

    def below(self, n: int) -> int:
        if n == 1:
            return 0
        mask = (1 << (n - 1).bit_length()) - 1
        while True:
            u = self.word()
            if n > 1 << 32:
                u = u << 32 | self.word()
            if u & mask < n:
                return u & mask

    def bernoulli_exp(self, num: int, den: int) -> bool:
        k = 1
        while self.below(den * k) < num:
            k += 1
        return k % 2 == 1

    def discrete_laplace(self, t: int, s: int) -> int:
        """Canonne–Kamath–Steinke 2020, Alg 2, written independently of the kernel."""
        while True:
            u = self.below(t)
            if not self.bernoulli_exp(u, t):
                continue
            v = 0
            while self.bernoulli_exp(1, 1):
                v += 1
            y = (u + t * v) // s
            negative = self.word() & 1 == 1
            if negative and y == 0:
                continue
            return -y if negative else y


@pytest.mark.parametrize("scale", [0.5, 1 / 3, 25.0, 3e7])  # 3e7·256 > 2^32: two-word uniforms
def test_discrete_laplace_matches_pure_python_reference(noise: KeyedNoise, scale: float) -> None:
    ctx = ("ref", 7)
    subkey = hmac.new(KEY, encode_context(ctx), hashlib.sha256).digest()
    sigma = effective_scale(scale)
    streams = np.array([0, 1, 2, 3, 2**33, U64_MAX], dtype=np.uint64)
    events = np.array([0, 0, 1, MAX_EVENT, 77, 5], dtype=np.uint64)
    got = noise.discrete_laplace_at(scale, ctx, streams, events)
    expected = [
        _ReferenceStream(subkey, int(st), int(ev)).discrete_laplace(
            sigma.numerator, sigma.denominator
        )
        for st, ev in zip(streams, events, strict=True)
    ]
    assert got.tolist() == expected


# -- determinism and separation ----------------------------------------------------------------


def _draws(
    noise: KeyedNoise, ctx: tuple[int | str, ...], stream: int = 0, event: int = 0
) -> list[float]:
    """64 Laplace draws and 64 uniforms whose addresses are offsets of (stream, event)."""
    offsets = np.arange(64, dtype=np.uint64)
    lap = noise.discrete_laplace_at(25.0, ctx, stream + offsets, event + 2 * offsets)
    uni = noise.uniform_at(ctx, stream + offsets, event + 2 * offsets)
    return lap.tolist() + uni.tolist()


def test_P2_same_address_same_values(noise: KeyedNoise) -> None:
    fresh = KeyedNoise(bytes(KEY))  # an equal key in a different object, empty subkey cache
    ctx = ("isc", 3, 1, "thr")
    first = _draws(noise, ctx, 5, 11)
    assert _draws(noise, ctx, 5, 11) == first
    assert _draws(fresh, ctx, 5, 11) == first
    assert _draws(KeyedNoise(bytearray(KEY)), ctx, 5, 11) == first
    np.testing.assert_array_equal(noise.geometric(0.01, ctx, 100), fresh.geometric(0.01, ctx, 100))


def test_P2_different_address_different_values(noise: KeyedNoise) -> None:
    base = _draws(noise, ("isc", 3), 5, 11)
    variants = {
        "key": _draws(KeyedNoise(OTHER_KEY), ("isc", 3), 5, 11),
        "key one bit": _draws(KeyedNoise(bytes([KEY[0] ^ 1]) + KEY[1:]), ("isc", 3), 5, 11),
        "context item": _draws(noise, ("isc", 4), 5, 11),
        "context length": _draws(noise, ("isc", 3, 0), 5, 11),
        "stream": _draws(noise, ("isc", 3), 6, 11),
        "event": _draws(noise, ("isc", 3), 5, 12),
    }
    for what, other in variants.items():
        # 64 uniforms on a 2^-53 grid: a single shared value would already be suspicious.
        assert not set(base[64:]) & set(other[64:]), what
        assert base[:64] != other[:64], what


def test_stream_and_event_are_not_interchangeable(noise: KeyedNoise) -> None:
    a = noise.uniform_at(("x",), np.arange(1, 50), 0)
    b = noise.uniform_at(("x",), 0, np.arange(1, 50))
    assert not set(a.tolist()) & set(b.tolist())


def test_fingerprint_depends_on_key_only() -> None:
    assert KeyedNoise(KEY).fingerprint() == KeyedNoise(bytes(KEY)).fingerprint()
    assert KeyedNoise(KEY).fingerprint() != KeyedNoise(OTHER_KEY).fingerprint()
    assert len(KeyedNoise(KEY).fingerprint()) == 16


@pytest.mark.parametrize("scale", [0.5, 2.0, 50.0])
def test_prefix_stability(noise: KeyedNoise, scale: float) -> None:
    n = 3 * 4096 + 17  # crosses the kernel's parallel chunk boundaries
    full = noise.discrete_laplace(scale, ("pfx",), n)
    for k in (1, 100, 4095, 4096, 4097, n):  # k = 0: see test_size_zero_gives_empty
        np.testing.assert_array_equal(full[:k], noise.discrete_laplace(scale, ("pfx",), k))
    np.testing.assert_array_equal(full, noise.discrete_laplace_at(scale, ("pfx",), np.arange(n), 0))
    np.testing.assert_array_equal(
        full[::-1], noise.discrete_laplace_at(scale, ("pfx",), np.arange(n)[::-1], 0)
    )
    # Scalar streams broadcast against event arrays and vice versa.
    np.testing.assert_array_equal(
        noise.discrete_laplace_at(scale, ("pfx",), 3, np.arange(5)),
        [noise.discrete_laplace_at(scale, ("pfx",), 3, e)[0] for e in range(5)],
    )


# -- context encoding --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (("a", "b"), ("ab",)),
        (("ab", ""), ("a", "b")),
        ((1,), ("1",)),
        ((12,), (1, 2)),
        ((-1,), ("-1",)),
        ((-1,), (1,)),
        (("",), ()),
        ((0,), ()),
        (("i",), (0,)),
        (("s",), ("",)),
        (("a\x00",), ("a",)),
        ((1, 23), (12, 3)),
        (("é",), ("e\u0301",)),
    ],
)
def test_context_encoding_is_injective(
    noise: KeyedNoise, left: tuple[int | str, ...], right: tuple[int | str, ...]
) -> None:
    assert encode_context(left) != encode_context(right)
    assert noise.subkey(left).tolist() != noise.subkey(right).tolist()
    a = noise.discrete_laplace(25.0, left, 32)
    b = noise.discrete_laplace(25.0, right, 32)
    assert a.tolist() != b.tolist()


def test_context_numpy_integers_encode_like_ints(noise: KeyedNoise) -> None:
    """The subkey cache treats np.int64(3) and 3 as one key, so their encodings must agree."""
    assert encode_context((np.int64(3), np.uint8(4))) == encode_context((3, 4))
    assert (
        noise.discrete_laplace(2.0, (np.int32(9),), 8).tolist()
        == KeyedNoise(KEY).discrete_laplace(2.0, (9,), 8).tolist()
    )


@pytest.mark.parametrize(
    "item", [True, False, np.bool_(True), 1.0, np.float64(2.0), None, b"x", (1,), 1j]
)
def test_context_rejects_non_int_non_str(item: object) -> None:
    noise = KeyedNoise(KEY)  # fresh: see the cached-context test below
    with pytest.raises(TypeError):
        encode_context(("ok", item))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        noise.discrete_laplace(1.0, ("ok", item), 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        noise.geometric(0.5, (item,), 3)  # type: ignore[arg-type]


@pytest.mark.parametrize("item", [True, 1.0, np.bool_(True), np.float64(1.0)])
def test_context_rejects_bool_float_even_when_equal_int_is_cached(item: object) -> None:
    noise = KeyedNoise(KEY)
    noise.discrete_laplace(1.0, ("ok", 1), 3)
    with pytest.raises(TypeError):
        noise.discrete_laplace(1.0, ("ok", item), 3)  # type: ignore[arg-type]


# -- keys and key hygiene ----------------------------------------------------------------------


@pytest.mark.parametrize("length", [0, 1, 8, 15])
def test_short_keys_rejected(length: int) -> None:
    with pytest.raises(ConfigError):
        KeyedNoise(bytes(length))


def test_minimum_key_length_and_non_bytes_keys() -> None:
    KeyedNoise(bytes(16))
    KeyedNoise(bytearray(16))
    with pytest.raises(ConfigError):
        KeyedNoise(KEY.hex())  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        KeyedNoise(None)  # type: ignore[arg-type]


def _leaks(text: str) -> list[str]:
    """Which spellings of DISTINCTIVE_KEY occur in ``text``."""
    spellings = {
        "raw": DISTINCTIVE_KEY.decode("latin-1"),
        "raw-prefix": DISTINCTIVE_KEY[:12].decode("latin-1"),
        "bytes-repr": repr(DISTINCTIVE_KEY),
        "hex": DISTINCTIVE_KEY.hex(),
        "hex-prefix": DISTINCTIVE_KEY[:8].hex(),
        "HEX": DISTINCTIVE_KEY.hex().upper(),
        "spaced-hex": DISTINCTIVE_KEY[:8].hex(" "),
        "list": str(list(DISTINCTIVE_KEY[:8]))[1:-1],
    }
    low = text.lower()
    return [name for name, s in spellings.items() if s in text or s.lower() in low]


def test_key_absent_from_repr_and_str() -> None:
    secret = KeyedNoise(DISTINCTIVE_KEY)
    secret.discrete_laplace(1.0, ("warm",), 2)  # populate the subkey cache
    for text in (repr(secret), str(secret), f"{secret}", f"{secret!r}", repr([secret])):
        assert _leaks(text) == [], text
    assert "redacted" in repr(secret)
    # The fingerprint is public: it must not be a spelling of the key either.
    assert _leaks(secret.fingerprint()) == []


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickling_refused_without_leaking(protocol: int) -> None:
    secret = KeyedNoise(DISTINCTIVE_KEY)
    with pytest.raises(TypeError) as info:
        pickle.dumps(secret, protocol=protocol)
    assert _leaks(str(info.value)) == [] and _leaks(repr(info.value)) == []
    with pytest.raises(TypeError):
        pickle.dumps({"nested": [secret]}, protocol=protocol)


def test_error_messages_do_not_leak_the_key() -> None:
    secret = KeyedNoise(DISTINCTIVE_KEY)
    calls = [
        lambda: secret.discrete_laplace(0.0, ("c",), 3),
        lambda: secret.discrete_laplace(float("nan"), ("c",), 3),
        lambda: secret.discrete_laplace(1e300, ("c",), 3),
        lambda: secret.discrete_laplace(1.0, ("c", 1.5), 3),
        lambda: secret.discrete_laplace_at(1.0, ("c",), 0, 1 << 56),
        lambda: secret.discrete_laplace_at(1.0, ("c",), -1, 0),
        lambda: secret.discrete_laplace_at(1.0, ("c",), 0.5, 0),
        lambda: secret.geometric(1.5, ("c",), 3),
        lambda: secret.geometric_at(0.5, ("c",), 0, 1 << 56),
        lambda: KeyedNoise(DISTINCTIVE_KEY[:15]),
        lambda: KeyedNoise(DISTINCTIVE_KEY.hex()),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises((TypeError, ValueError)) as info:
            call()
        for text in (str(info.value), repr(info.value)):
            assert _leaks(text) == [], text


# -- output types, scales, address limits -------------------------------------------------------


def test_outputs_are_int64(noise: KeyedNoise) -> None:
    outputs = [
        noise.discrete_laplace(2.0, ("t",), 10),
        noise.discrete_laplace_at(2.0, ("t",), np.arange(4, dtype=np.int32), 3),
        noise.geometric(0.3, ("t",), 10),
        noise.geometric(1.0, ("t",), 10),
        noise.geometric(0.0, ("t",), 3),
        noise.geometric_at(np.array([0.1, 0.9]), ("t",), np.arange(2), np.uint64(1)),
        geometric_from_uniform(np.array([1, 2**53], dtype=np.uint64), np.array([0.5, 0.5])),
    ]
    for out in outputs:
        assert isinstance(out, np.ndarray) and out.dtype == np.int64
    assert outputs[0].shape == (10,)


@pytest.mark.parametrize(
    ("scale", "expected"),
    [
        (0.5, Fraction(1, 2)),
        (2.0, Fraction(2)),
        (2, Fraction(2)),
        (25.0, Fraction(25)),
        (50.0, Fraction(50)),
        (1 / 3, Fraction(43, 128)),  # 85.33/256 → 86/256
        (1e-3, Fraction(1, 256)),
        (1 / 256, Fraction(1, 256)),
        (1 / 256 + 1e-12, Fraction(2, 256)),
        (2.0 + 2**-40, Fraction(513, 256)),
        (0.1, Fraction(26, 256)),
        (1e-300, Fraction(1, 256)),
    ],
)
def test_P2a_effective_scale_rounds_up(scale: float, expected: Fraction) -> None:
    got = effective_scale(scale)
    assert got == expected
    assert Fraction(scale) <= got < Fraction(scale) + Fraction(1, SCALE_DENOMINATOR)
    assert SCALE_DENOMINATOR % got.denominator == 0


def test_P2a_effective_scale_never_rounds_down_on_a_grid() -> None:
    for scale in np.geomspace(1e-4, 1e6, 997).tolist() + [k / 256 for k in range(1, 600)]:
        got = effective_scale(scale)
        assert Fraction(scale) <= got < Fraction(scale) + Fraction(1, 256), scale


@pytest.mark.parametrize("scale", [0, 0.0, -1.0, float("nan"), float("inf"), 2.0**33, "2"])
def test_effective_scale_rejects_bad_scales(scale: float) -> None:
    with pytest.raises(ConfigError):
        effective_scale(scale)


def test_events_at_or_above_2_pow_56_rejected(noise: KeyedNoise) -> None:
    top = np.array([MAX_EVENT], dtype=np.uint64)
    assert MAX_EVENT == 2**56 - 1
    noise.discrete_laplace_at(2.0, ("e",), 0, top)
    noise.geometric_at(0.5, ("e",), 0, top)
    for bad in (2**56, 2**56 + 1, 2**63, U64_MAX):
        events = np.array([0, bad], dtype=np.uint64)
        with pytest.raises(ValueError, match="2\\^56"):
            noise.discrete_laplace_at(2.0, ("e",), np.arange(2), events)
        with pytest.raises(ValueError, match="2\\^56"):
            noise.geometric_at(0.5, ("e",), np.arange(2), events)


def test_fast_address_path_validates_and_agrees(noise: KeyedNoise) -> None:
    """uint64 streams with an int or a uint64 array of events skip broadcasting; they must
    reject the same events and draw the same values as the general path."""
    streams = np.arange(5, dtype=np.uint64)
    with pytest.raises(ValueError, match="2\\^56"):
        noise.discrete_laplace_at(2.0, ("e",), streams, np.full(5, 2**56, np.uint64))
    with pytest.raises(ValueError, match="2\\^56"):
        noise.discrete_laplace_at(2.0, ("e",), streams, 2**56)
    with pytest.raises(ValueError):
        noise.discrete_laplace_at(2.0, ("e",), streams, -1)
    general = noise.discrete_laplace_at(2.0, ("e",), np.arange(5), np.full(5, 7))
    np.testing.assert_array_equal(noise.discrete_laplace_at(2.0, ("e",), streams, 7), general)
    np.testing.assert_array_equal(
        noise.discrete_laplace_at(2.0, ("e",), streams, np.full(5, 7, np.uint64)), general)


def test_subkey_cache_tells_contexts_apart(noise: KeyedNoise) -> None:
    """Tuples key the subkey cache: 1 and "1", and np.int64(1) (encoded like 1) after it."""
    one = noise.subkey(("c", 1)).copy()
    assert not np.array_equal(noise.subkey(("c", "1")), one)
    np.testing.assert_array_equal(noise.subkey(("c", np.int64(1))), one)
    np.testing.assert_array_equal(noise.subkey(["c", 1]), one)
    np.testing.assert_array_equal(KeyedNoise(KEY).subkey(("c", 1)),
                                  KeyedNoise(KEY).subkey(("c", np.int64(1))))


def test_uniform_at_rejects_events_at_or_above_2_pow_56(noise: KeyedNoise) -> None:
    with pytest.raises(ValueError):
        noise.uniform_at(("e",), 0, np.uint64(2**56))


def test_length_one_arrays_broadcast(noise: KeyedNoise) -> None:
    np.testing.assert_array_equal(
        noise.discrete_laplace_at(25.0, ("b",), np.array([3]), np.arange(5)),
        noise.discrete_laplace_at(25.0, ("b",), 3, np.arange(5)),
    )


def test_geometric_size_zero_gives_empty(noise: KeyedNoise) -> None:
    out = noise.geometric(0.5, ("z",), 0)
    assert out.dtype == np.int64 and out.shape == (0,)


def test_discrete_laplace_size_zero_gives_empty(noise: KeyedNoise) -> None:
    out = noise.discrete_laplace(2.0, ("z",), 0)
    assert out.dtype == np.int64 and out.shape == (0,)


def test_negative_or_non_integer_addresses_rejected(noise: KeyedNoise) -> None:
    with pytest.raises(ValueError):
        noise.discrete_laplace_at(2.0, ("e",), np.array([0, -1]), 0)
    with pytest.raises(ValueError):
        noise.discrete_laplace_at(2.0, ("e",), 0, np.array([-3]))
    with pytest.raises(TypeError):
        noise.discrete_laplace_at(2.0, ("e",), np.array([0.0, 1.0]), 0)


def test_geometric_extremes(noise: KeyedNoise) -> None:
    np.testing.assert_array_equal(noise.geometric(1.0, ("g",), 1000), np.zeros(1000))
    raw = np.array([1, 2, 2**52, 2**53 - 1, 2**53], dtype=np.uint64)
    np.testing.assert_array_equal(geometric_from_uniform(raw, np.ones(5)), np.zeros(5))
    # u = 1 (raw = 2^53) means "succeeded at once" for every p.
    assert geometric_from_uniform(np.array([2**53], dtype=np.uint64), np.array([1e-12]))[0] == 0
    assert (noise.geometric(0.0, ("g",), 10) == 1 << 62).all()
    assert (noise.geometric(0.5, ("g",), 1000) >= 0).all()
    with pytest.raises(ValueError):
        noise.geometric(-0.1, ("g",), 3)
    with pytest.raises(ValueError):
        noise.geometric(float("nan"), ("g",), 3)
