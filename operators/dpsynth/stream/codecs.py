"""Wire codecs of the operator: raw events in, dead letters and release record keys out.

Layer: adapter. A raw event is one Kafka message whose value is msgpack: a map
``{column: number, ...}`` (one record) or an array of such maps (a batch). :func:`decode_event`
turns the bytes into a list of records or a reason; :func:`split_batch` checks the records of
many messages against the schema at once (one vectorised call) and hands back, per message, the
reasons of its invalid records. A message with any invalid record becomes one dead-letter record
(:func:`encode_dead_letter`) of bounded size: where it came from, its length and keyed digest,
the reasons and at most a configured prefix of its bytes. The digest is an HMAC under a subkey
of the run's noise key (:class:`DeadLetterHasher`): the operator, who holds the key, can match a
message to its letter (:func:`dead_letter_digest`); a reader of the topic without the key cannot
test guesses of a short message against it (docs/privacy.md, "What neither notion covers").

Reasons name the field and the rule broken, never a value (docs/design.md D18): the
dead-letter topic holds raw records and needs the protection of the raw-events topic, but logs
and metrics do not.

>>> decode_event(b"\\x81\\xa1x\\x01")
([{'x': 1}], None)
>>> decode_event(b"\\xc1")
(None, 'message is not valid msgpack (FormatError); send one map or an array of maps')
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from dpsynth.keys import NoiseKey, load_noise_key
from dpsynth.schema import ClipReport, Schema

#: Version of the dead-letter record layout written (1: the whole message; 2, issue 15: bounded,
#: a SHA-256 and a prefix instead of the whole message; 3, issue 44: a keyed HMAC-SHA256 instead
#: of the unsalted SHA-256, and the key's fingerprint).
DEAD_LETTER_FORMAT = 3
#: Formats :func:`decode_dead_letter` reads: a topic written before issue 44 still decodes.
DEAD_LETTER_FORMATS_READ = frozenset((2, DEAD_LETTER_FORMAT))
#: Context of the subkey that keys dead letters' digests (never used for noise): the subkey is
#: ``HMAC-SHA256(noise key, encode_context(DEAD_LETTER_CONTEXT))``, i.e. ``KeyedNoise.subkey``.
DEAD_LETTER_CONTEXT = ("dpsynth", "dead-letter", "hmac-sha256", "v1")
#: Rejected records listed in one dead letter (``n_rejects`` counts them all).
MAX_REJECTS_LISTED = 100
#: Characters of one listed reason.
MAX_REASON_CHARS = 300
#: Largest message decoded (bytes); Kafka's default limit is 1 MB.
MAX_EVENT_BYTES = 16 * 2**20


def decode_event(value: bytes | None) -> tuple[list[Any] | None, str | None]:
    """The records of one raw event, or ``(None, reason)`` when the message is unusable.

    A map is one record; an array is a batch (its items are checked by the schema later, so a
    bad item rejects that record only). Anything else is rejected whole.
    """
    if value is None:
        return None, "message has no value (a tombstone); send one map or an array of maps"
    if len(value) > MAX_EVENT_BYTES:
        return None, f"message is larger than {MAX_EVENT_BYTES} bytes; split the batch"
    try:
        obj = msgpack.unpackb(value, raw=False, strict_map_key=False)
    except Exception as e:  # noqa: BLE001 - any failure means "undecodable"
        # privacy: the exception text may quote the data; name its class only
        return None, (
            f"message is not valid msgpack ({type(e).__name__}); send one map or an array of maps"
        )
    if isinstance(obj, dict):
        return [obj], None
    if isinstance(obj, list):
        return obj, None
    return None, (
        f"message must be a msgpack map (one record) or an array of maps (a batch), "
        f"not {_kind(obj)}"
    )


def _kind(obj: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a float", str: "a string",
            bytes: "binary data", type(None): "nil"}.get(type(obj), type(obj).__name__)


@dataclass
class BatchResult:
    """The valid rows of a batch of messages and the rejects of each message."""

    #: n×d points (point engine) or n×p int64 codes (tabular engine), message then record order
    points: np.ndarray
    clip_report: ClipReport
    #: per message: number of valid records it contributed
    valid_per_message: np.ndarray
    #: per message index: [(record index within the message, reason), ...]
    rejects: dict[int, list[tuple[int, str]]]
    #: per message: number of records it held (0 when undecodable)
    records_per_message: np.ndarray
    #: per valid row: its user's canonical id (privacy unit "user"), else None
    users: list[bytes] | None = None


#: check(records, owner) -> (valid rows in order, clip report, [(record index, reason), ...]);
#: ``owner[i]`` is the index of record i's message.
Checker = Callable[[list[Any], list[int]],
                   tuple[np.ndarray, ClipReport, list[tuple[int, str]]]]


def split_batch(schema: Schema, values: Sequence[bytes | None]) -> BatchResult:
    """Decode the values of many messages and check all their records in one schema call.

    Returns the valid points in order, and for every message with a problem the list of
    ``(record index, reason)``; an undecodable message has the single entry ``(-1, reason)``.
    """

    def check(records: list[Any], owner: list[int]
              ) -> tuple[np.ndarray, ClipReport, list[tuple[int, str]]]:
        if not records:
            return np.zeros((0, schema.d)), ClipReport(schema.names, (0,) * schema.d), []
        return schema.split_valid(records)

    return split_messages(values, check)


def split_messages(values: Sequence[bytes | None], check: Checker,
                   refused: Sequence[str | None] | None = None) -> BatchResult:
    """Decode many messages and check all their records with one call of ``check``.

    The engine-independent half of :func:`split_batch`: ``check`` gets every decoded record
    (possibly none) with its message index, and returns the valid rows, a clip report and the
    rejected records' indices with reasons that name the field, never the value. A message with
    a reason in ``refused`` is rejected whole, undecoded (e.g. a key of another partition).
    """
    records: list[Any] = []
    owner: list[int] = []
    rejects: dict[int, list[tuple[int, str]]] = {}
    counts = np.zeros(len(values), np.int64)
    starts = np.zeros(len(values), np.int64)
    for m, value in enumerate(values):
        items, reason = (None, refused[m]) if refused and refused[m] else decode_event(value)
        starts[m] = len(records)
        if items is None:
            rejects[m] = [(-1, str(reason))]
            continue
        counts[m] = len(items)
        records.extend(items)
        owner.extend([m] * len(items))
    valid = counts.copy()
    rows, report, bad = check(records, owner)
    for index, reason in bad:
        m = owner[index]
        rejects.setdefault(m, []).append((index - int(starts[m]), reason))
        valid[m] -= 1
    return BatchResult(rows, report, valid, rejects, counts)


class DeadLetterHasher:
    """Keyed digests of rejected messages: HMAC-SHA256 under a subkey of the run's noise key.

    The subkey is the 32 bytes of ``KeyedNoise(key).subkey(DEAD_LETTER_CONTEXT)``, i.e.
    ``HMAC-SHA256(key, encode_context(DEAD_LETTER_CONTEXT))``, derived like the noise's subkeys
    (docs/privacy.md P2) and the user-id hash's (:mod:`dpsynth.bounding.ids`) under a context of
    its own: neither the key nor the subkey is ever written, and a digest shows nothing of
    either. Without the key a digest cannot be recomputed, so a reader of the dead-letter topic
    cannot confirm a guessed message (docs/design.md D11; docs/privacy.md).

    >>> hasher = DeadLetterHasher(NoiseKey(bytes(32), source="doc"))
    >>> hasher, len(hasher.digest(b"\\x81\\xa1x\\x01"))
    (DeadLetterHasher(key=<redacted>), 64)
    """

    __slots__ = ("__subkey", "key_fingerprint")

    def __init__(self, key: NoiseKey) -> None:
        from dpsynth.noise import KeyedNoise  # Numba only once a key is used, as in dpsynth.keys

        words = KeyedNoise(key.reveal()).subkey(DEAD_LETTER_CONTEXT)
        self.__subkey = words.astype("<u4").tobytes()  # the HMAC's 32 bytes, in order
        #: the key's public fingerprint (published with every release), written in each letter
        self.key_fingerprint = key.fingerprint

    def __repr__(self) -> str:
        return "DeadLetterHasher(key=<redacted>)"

    def __reduce__(self) -> Any:
        raise TypeError("a DeadLetterHasher holds a subkey of the noise key and cannot be pickled")

    def digest(self, value: bytes) -> str:
        """HMAC-SHA256 of the message's bytes under the subkey, 64 hex characters."""
        return hmac.digest(self.__subkey, value, "sha256").hex()


def dead_letter_digest(value: bytes, key: NoiseKey | None = None) -> str:
    """The ``hmac_sha256`` that the dead letter of message ``value`` carries: how an operator
    finds a message's letter (docs/operator.md, "Dead letters").

    ``key``: the run's key; by default the environment's (``DPSYNTH_NOISE_KEY`` or
    ``DPSYNTH_NOISE_KEY_FILE``, :func:`dpsynth.keys.load_noise_key`), as the worker reads it.
    """
    return DeadLetterHasher(load_noise_key() if key is None else key).digest(value)


def encode_dead_letter(
    *,
    value: bytes | None,
    topic: str,
    partition: int,
    offset: int,
    timestamp_ms: int | None,
    rejects: Sequence[tuple[int, str]],
    n_records: int,
    hasher: DeadLetterHasher,
    prefix_bytes: int = 0,
) -> bytes:
    """One dead-letter record (msgpack map), ``format`` 3, of bounded size whatever the message.

    Where the message came from (``topic``, ``partition``, ``offset``, ``timestamp_ms``), its
    ``length`` in bytes and ``hmac_sha256`` (hex, :meth:`DeadLetterHasher.digest`; both None for
    a tombstone) under the key of fingerprint ``key_fingerprint``, so the operator can match a
    message to its letter, and ``prefix``: at most ``prefix_bytes`` of the payload
    (``DPSYNTH_DEAD_LETTER_PREFIX_BYTES``, default 0: raw values are sensitive). No unsalted hash
    of the message is written: one would let any reader of the topic test guesses of a short
    message. ``length`` is exact, and for a short message narrows what it can be (docs/privacy.md):
    the topic needs the raw topic's protection anyway. ``rejects`` lists ``[record index,
    reason]`` (index −1: the whole message), at most :data:`MAX_REJECTS_LISTED` of them, each
    reason cut to :data:`MAX_REASON_CHARS`; ``n_rejects`` is their number and ``reason``
    repeats the first so a human reading the topic sees the problem at once. The valid records
    of the same message were counted; the rejected ones were not. The bound (under 64 KiB + the
    prefix) keeps every dead letter far below any producer's or topic's size limit, so
    dead-lettering can never stop a partition.
    """
    listed = [[int(i), str(r)[:MAX_REASON_CHARS]] for i, r in rejects[:MAX_REJECTS_LISTED]]
    return msgpack.packb(
        {
            "format": DEAD_LETTER_FORMAT,
            "topic": topic,
            "partition": int(partition),
            "offset": int(offset),
            "timestamp_ms": timestamp_ms,
            "reason": listed[0][1] if listed else "",
            "rejects": listed,
            "n_rejects": len(rejects),
            "n_records": int(n_records),
            "length": None if value is None else len(value),
            "hmac_sha256": None if value is None else hasher.digest(value),
            "key_fingerprint": hasher.key_fingerprint,
            "prefix": None if value is None else bytes(value[:max(prefix_bytes, 0)]),
        },
        use_bin_type=True,
    )


def decode_dead_letter(data: bytes) -> dict[str, Any]:
    """Inverse of :func:`encode_dead_letter` (for operators' tools and tests).

    Reads format 3 and, leniently, format 2 (before issue 44: ``sha256``, an unsalted digest,
    where format 3 has ``hmac_sha256`` and ``key_fingerprint``); anything else is a ValueError.
    """
    out = msgpack.unpackb(data, raw=False)
    if not isinstance(out, dict) or out.get("format") not in DEAD_LETTER_FORMATS_READ:
        raise ValueError(f"not a dpsynth dead-letter record of format "
                         f"{' or '.join(map(str, sorted(DEAD_LETTER_FORMATS_READ)))}; a record "
                         "of the dead-letter topic was expected")
    return dict(out)


def dead_letter_key(topic: str, partition: int, offset: int) -> bytes:
    """Key of a dead letter: where its message came from (a replay re-sends the same key)."""
    return f"{topic}/{partition}/{offset}".encode()


def release_record_key(run_id: str, partition: int, sequence: int) -> bytes:
    """Key of every record of one release (on the synthetic and the points topics).

    Not what places them: :func:`output_partition` does.

    >>> release_record_key("run-a", 3, 17)
    b'run-a/3/17'
    """
    return f"{run_id}/{partition}/{sequence}".encode()


def output_partition(partition: int, partitions: int) -> int:
    """The partition of an output topic (synthetic, points, latest view; the state topic's
    rule too) that every record of input partition ``partition`` goes to: ``partition mod
    partitions``.

    One input partition's releases are produced in sequence order by its one transactional
    producer; on one output partition they stay in that order for every consumer (issue 46).
    Placed explicitly, not by the key's hash: the key holds the sequence, so Kafka's default
    partitioner would spread one input partition's releases over all output partitions.

    >>> output_partition(5, 3), output_partition(1, 4)
    (2, 1)
    """
    return int(partition) % max(int(partitions), 1)
