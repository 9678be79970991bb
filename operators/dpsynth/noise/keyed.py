"""Derived noise: every random draw of dpsynth is a function of (secret key, context, address).

Layer: core. The only source of randomness in the DP core (docs/design.md D5; docs/privacy.md P2). A
context (a tuple of ints and strings, e.g. ``("isc", level, time_level, "thr")``) is turned into a
256-bit subkey by HMAC-SHA256 over an unambiguous encoding; the subkey keys a ChaCha20 keystream
whose nonce is a 64-bit *stream* (a cell index) and whose block counter carries a 56-bit *event* (a
segment, tick or tree node). Draws for different (context, stream, event) use disjoint keystream
words, hence are independent; the same address always gives the same value, so a replay or a retry
can never release a differently-noised version of the same count.

Samplers
--------
``discrete_laplace``
    **Exact** Lap_Z(σ) (pmf ``(1-p)/(1+p) · p^|z|``, ``p = exp(-1/σ)``, docs/algorithms.md A.1), by
    the algorithm of Canonne, Kamath and Steinke (2020, Alg 2) on exact integer arithmetic. The
    scale is first rounded *up* to a multiple of 2^-8 (``effective_scale``): more noise, never less,
    so every privacy statement made for σ holds; at σ ≥ 1 the change is below 0.4 %.
``geometric``
    Number of failures before the first success of Bernoulli(p) trials, by inversion of a 53-bit
    uniform in double precision. Not exact; its deviation is bounded and tested: for every m ≥ 0,
    ``|P̂(G ≥ m) − (1−p)^m| ≤ 2^-40 · (1−p)^m + 2^-52`` (docs/privacy.md, P2b). It is used only
    for the lazy firing tick of the sparse counter's threshold test.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from functools import cache

import numpy as np

from dpsynth._types import Counts
from dpsynth.errors import ConfigError
from dpsynth.noise import _kernels
from dpsynth.noise._kernels import Words
from dpsynth.noise.samplers import TWO_53, effective_scale, geometric_from_uniform
from dpsynth.noise.sparse import nonzero_draws

Context = tuple[int | str, ...]

#: Events are 56-bit: the low 8 bits of the ChaCha20 block counter index blocks within a sample.
MAX_EVENT = (1 << 56) - 1
_DOMAIN = b"dpsynth.noise.v1"
_PLAIN = (int, str)  # exact types (not bool, not numpy integers) whose tuples key the cache


def encode_context(context: Sequence[int | str]) -> bytes:
    """Unambiguous byte encoding of a context: a type tag and a length before every item.

    >>> encode_context(("bm", 3))
    b'dpsynth.noise.v1s\\x00\\x00\\x00\\x02bmi\\x00\\x00\\x00\\x013'
    """
    parts = [_DOMAIN]
    for item in context:
        if type(item) is str:  # the common items first: no isinstance chain, strings memoised
            piece = _STR_PIECES.get(item)
            if piece is None:
                raw = item.encode()
                piece = b"s" + len(raw).to_bytes(4, "big") + raw
                if len(_STR_PIECES) < 1024:
                    _STR_PIECES[item] = piece
            parts.append(piece)
            continue
        if type(item) is not int and (isinstance(item, bool)
                                or not isinstance(item, int | str | np.integer)):
            raise TypeError(
                f"context items must be int or str, got {type(item).__name__}; "
                "encode other values as strings"
            )
        if isinstance(item, str):  # a str subclass
            tag, raw = b"s", item.encode()
        else:
            tag, raw = b"i", str(int(item)).encode()
        parts.append(tag + len(raw).to_bytes(4, "big") + raw)
    return b"".join(parts)


#: Encoded string items (a context's names repeat: "partition", "step", "leaf", …).
_STR_PIECES: dict[str, bytes] = {}


def _addresses(
    streams: np.ndarray | int, events: np.ndarray | int
) -> tuple[np.ndarray, np.ndarray]:
    """Broadcast (streams, events) to two contiguous uint64 arrays, validating both."""
    if type(streams) is np.ndarray and streams.dtype == np.uint64 and streams.ndim == 1:
        # the common calls (cells of a histogram, nodes of a tree level): unsigned, so no scan
        # for negatives, and no broadcasting
        if type(events) is int and 0 <= events <= MAX_EVENT:
            return np.ascontiguousarray(streams), np.full(streams.size, events, np.uint64)
        if (type(events) is np.ndarray and events.dtype == np.uint64 and events.ndim == 1
                and events.size == streams.size
                and (events.size == 0 or int(events.max()) <= MAX_EVENT)):
            return np.ascontiguousarray(streams), np.ascontiguousarray(events)
    arrays = []
    for name, values in (("streams", streams), ("events", events)):
        arr = np.asarray(values)
        if arr.dtype.kind not in "ui":
            raise TypeError(f"{name} must be integers")
        if arr.size and int(arr.min()) < 0:
            raise ValueError(f"{name} must be non-negative")
        arrays.append(arr)
    st, ev = np.broadcast_arrays(*arrays)
    if st.ndim > 1:
        raise ValueError("streams and events must be scalars or 1-d arrays")
    if ev.size and int(ev.max()) > MAX_EVENT:
        raise ValueError("events must be below 2^56")
    return (
        np.ascontiguousarray(np.atleast_1d(st), dtype=np.uint64),
        np.ascontiguousarray(np.atleast_1d(ev), dtype=np.uint64),
    )


class KeyedNoise:
    """Keyed, cryptographically secure source of all privacy noise (docs/design.md D5; privacy P2).

    Parameters
    ----------
    key
        The run's secret noise key, at least 16 bytes (32 recommended). Never logged, never part
        of ``repr``, a snapshot or a release.

    Examples
    --------
    Known-answer values: they pin the derivation, the way test vectors pin a cipher.

    >>> noise = KeyedNoise(bytes(32))
    >>> noise.discrete_laplace(2.0, ("doc",), 6).tolist()
    [0, -1, 0, 0, 5, 1]
    >>> again = KeyedNoise(bytes(32)).discrete_laplace(2.0, ("doc",), 6)
    >>> bool((noise.discrete_laplace(2.0, ("doc",), 6) == again).all())
    True
    """

    __slots__ = ("__key", "_subkeys")

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes | bytearray):
            raise ConfigError("noise key must be bytes; decode a hex key with bytes.fromhex(...)")
        if len(key) < 16:
            raise ConfigError(
                f"noise key must be at least 16 bytes (got {len(key)}); use 32 random bytes, "
                "e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`"
            )
        self.__key = bytes(key)
        self._subkeys: dict[bytes | Context, Words] = {}

    def __repr__(self) -> str:
        return "KeyedNoise(key=<redacted>)"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("KeyedNoise holds the secret key and cannot be pickled; pass the key")

    def fingerprint(self) -> str:
        """A public 64-bit identifier of the key (HMAC of a fixed label), safe to log."""
        return hmac.new(self.__key, b"dpsynth.fingerprint", hashlib.sha256).hexdigest()[:16]

    def placement_seed(self, label: bytes = b"dpsynth.placement-seed") -> bytes:
        """A public seed for placement inside leaves: HMAC(key, label), revealing no noise.

        Derived under its own label, so publishing it shows neither the key nor any draw; the
        consumer library materialises identical points from it (privacy: P6).
        """
        return hmac.new(self.__key, label, hashlib.sha256).digest()

    def subkey(self, context: Sequence[int | str]) -> Words:
        """The ChaCha20 key of ``context`` as 8 uint64 words (cached; at most 4096 entries)."""
        # The cache is keyed by the encoding, which tells True from 1 and "1" from 1; a tuple
        # of exact ints and strs is keyed by itself, skipping the encoding on a hit.
        plain = (context if type(context) is tuple and all(type(item) in _PLAIN for item in context)
                 else None)
        words = self._subkeys.get(plain) if plain is not None else None
        if words is not None:
            return words
        encoded = encode_context(context)  # validates
        words = self._subkeys.get(encoded)
        if words is None:
            digest = hmac.new(self.__key, encoded, hashlib.sha256).digest()  # privacy: P2
            words = np.frombuffer(digest, dtype="<u4").astype(np.uint64)
            if len(self._subkeys) >= 4096:
                self._subkeys.clear()
            self._subkeys[encoded] = words
        if plain is not None:
            self._subkeys[plain] = words
        return words

    # -- discrete Laplace -------------------------------------------------------------------

    def discrete_laplace(self, scale: float, context: Sequence[int | str], size: int) -> Counts:
        """``size`` exact Lap_Z(scale) draws: streams 0..size-1 of ``context`` at event 0."""
        return self.discrete_laplace_at(
            scale, context, np.arange(size, dtype=np.uint64), np.zeros(size, np.uint64)
        )

    def discrete_laplace_at(
        self,
        scale: float,
        context: Sequence[int | str],
        streams: np.ndarray | int,
        events: np.ndarray | int,
    ) -> Counts:
        """Exact Lap_Z(scale) draws addressed by (context, streams[i], events[i]), vectorised.

        ``streams`` and ``events`` broadcast against each other; events must be < 2^56.
        """
        st, ev = _addresses(streams, events)
        sigma = effective_scale(scale)  # privacy: P2a (rounded up, never down)
        out = np.empty(st.size, dtype=np.int64)
        _kernels.discrete_laplace_many(
            self.subkey(context),
            np.uint64(sigma.numerator),
            np.uint64(sigma.denominator),
            st,
            ev,
            out,
        )
        return out

    def discrete_laplace_nonzero(self, scale: float, context: Sequence[int | str],
                                 size: int) -> tuple[Counts, Counts]:
        """(positions ascending, values) of the nonzero draws among ``size`` iid exact
        Lap_Z(scale): the same joint distribution as ``size`` dense draws, at the cost of the
        nonzero ones (:mod:`dpsynth.noise.sparse`; privacy: P2c). For P(Lap_Z ≠ 0) ≤ ½ only.

        Addresses: (context + ("nonzero",), j, 0|1) for the j-th nonzero draw — a context of
        its own, so the draws of ``discrete_laplace_at(scale, context, …)`` (the dense form
        of the same values) and these never share a keystream word.
        """
        if size < 0:
            raise ValueError("size must be non-negative")
        sigma = effective_scale(scale)  # privacy: P2a (rounded up, never down)
        return nonzero_draws(self.subkey((*context, "nonzero")), sigma.numerator,
                             sigma.denominator, int(size))

    # -- geometric -------------------------------------------------------------------------

    def geometric(self, p: float, context: Sequence[int | str], size: int) -> Counts:
        """``size`` draws of the number of failures before a success, success probability ``p``."""
        return self.geometric_at(
            np.full(size, p), context, np.arange(size, dtype=np.uint64), np.zeros(size, np.uint64)
        )

    def geometric_at(
        self,
        p: np.ndarray | float,
        context: Sequence[int | str],
        streams: np.ndarray | int,
        events: np.ndarray | int,
    ) -> Counts:
        """Geometric draws (failures before success) with per-draw success probability ``p``.

        Inversion of U uniform on {1..2^53}/2^53: G = ⌊ln U / ln(1−p)⌋, capped at 2^62; p = 1
        gives 0 and p = 0 gives the cap. Deviation bound in the module docstring (P2b).
        """
        st, ev = _addresses(streams, events)
        prob = np.asarray(p, dtype=np.float64)
        if prob.ndim > 1 or prob.size not in (1, st.size):
            raise ValueError("p must be a scalar or have one entry per (stream, event)")
        prob = np.broadcast_to(prob.reshape(-1), st.shape)
        if np.any(~((prob >= 0.0) & (prob <= 1.0))):
            raise ValueError("geometric success probability must lie in [0, 1]")
        raw = np.empty(st.size, dtype=np.uint64)
        _kernels.uniform53_many(self.subkey(context), st, ev, raw)
        return geometric_from_uniform(raw, prob)  # privacy: P2b

    def uniform_at(
        self, context: Sequence[int | str], streams: np.ndarray | int, events: np.ndarray | int
    ) -> np.ndarray:
        """Floats uniform on (0, 1] (53-bit grid) addressed by (context, stream, event)."""
        st, ev = _addresses(streams, events)
        raw = np.empty(st.size, dtype=np.uint64)
        _kernels.uniform53_many(self.subkey(context), st, ev, raw)
        return raw.astype(np.float64) / TWO_53


@cache
def warm_up() -> None:
    """Compile the kernels once (numba caches them on disk); call before timing anything."""
    noise = KeyedNoise(b"\x00" * 32)
    noise.discrete_laplace(1.0, ("warm",), 4)
    noise.geometric(0.5, ("warm",), 4)
