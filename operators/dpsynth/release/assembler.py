"""Reassembly of releases from interleaved records, as a consumer of the synthetic topic sees them.

Layer: core. Checks as :func:`~dpsynth.release.points_v1.decode_release` does, drops duplicates
by :class:`~dpsynth.release.framing.ReleaseKey`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

from dpsynth.errors import ConfigError
from dpsynth.release.framing import (
    ReleaseIncompleteError,
    ReleaseKey,
    is_field_int,
    is_int,
    key_of,
    unpack,
)
from dpsynth.release.model import Release
from dpsynth.release.points_v1 import (
    MAX_DECODE_DEPTH,
    _Header,
    _parse_header,
    decode_release,
)


@dataclass
class _Pending:
    header_raw: bytes
    header: _Header
    chunks: dict[int, bytes] = field(default_factory=dict)


@dataclass
class _Seen:
    floor: int = -1  # every sequence <= floor counts as assembled
    sequences: set[int] = field(default_factory=set)


class ReleaseAssembler:
    """Reassemble releases from records of many releases interleaved, as a consumer sees them.

    Records are grouped by (run_id, partition, sequence). Policy:

    - An end record completes its release: ``add`` returns the :class:`Release` (checked as
      by :func:`decode_release`), exactly once per key.
    - Any record of an already assembled key is dropped silently (``None``): retried releases
      are byte-identical (docs/design.md D5), so a re-delivery is a duplicate. A byte-identical copy
      of a record already held for a pending release is dropped too (at-least-once delivery).
    - A corrupt release raises :class:`ReleaseIncompleteError` and is discarded, so a later
      complete retry can still be assembled: a record that cannot be decoded, a chunk or end
      without its header (the consumer started mid-release, or the header was lost), two
      different versions of the same header or chunk, missing chunks at the end record, a bad
      checksum or an inconsistent sum. The assembler stays usable after raising; the error's
      ``reason`` is a stable code (:data:`~dpsynth.release.framing.REASONS`).
    - At most ``max_pending`` releases may be open; a header beyond that evicts the oldest open
      release, which is reported by raising (the new header itself is kept).
    - Per (run_id, partition) the last ``remember`` assembled sequences are kept; older
      sequences (replays of the distant past) count as assembled and are dropped.

    >>> import numpy as np
    >>> from dpsynth.release import Release, encode_release
    >>> a = Release(t=1, depth=1, leaf_counts=np.array([0, 1]), metadata={"d": 1})
    >>> ra = encode_release(a, run_id="r", partition=0, sequence=1)
    >>> rb = encode_release(a, run_id="r", partition=1, sequence=1)
    >>> asm = ReleaseAssembler()
    >>> out = [asm.add(r) for r in (ra[0], rb[0], ra[1], rb[1], ra[2], rb[2], *ra)]
    >>> [o is not None for o in out]
    [False, False, False, False, True, True, False, False, False]
    """

    def __init__(
        self, *, max_pending: int = 1024, remember: int = 4096, max_depth: int = MAX_DECODE_DEPTH
    ) -> None:
        for name, value in (("max_pending", max_pending), ("remember", remember)):
            if not is_int(value) or value < 1:
                raise ConfigError(f"{name} ({value!r}) must be an integer >= 1")
        self.max_pending = max_pending
        self.remember = remember
        self.max_depth = max_depth
        self._pending: dict[ReleaseKey, _Pending] = {}
        self._seen: dict[tuple[str, int], _Seen] = {}

    @property
    def pending(self) -> tuple[ReleaseKey, ...]:
        """Keys of the releases begun but not yet complete, oldest first."""
        return tuple(self._pending)

    def add(self, record: bytes | None) -> Release | None:
        """Take one record; return the release it completes, else None (see the class policy)."""
        done = self.add_keyed(record)
        return None if done is None else done[1]

    def add_keyed(self, record: bytes | None) -> tuple[ReleaseKey, Release] | None:
        """As :meth:`add`, returning ``(key, release)`` so callers know whose release it is.
        A record that is not bytes (None: a Kafka tombstone) is refused as undecodable."""
        rec = unpack(record, "record")
        assert record is not None  # unpack refused it
        key = key_of(rec, "record")
        if self._is_assembled(key):
            return None
        kind = rec.get("kind")
        pending = self._pending.get(key)
        if kind == "header":
            if pending is not None:
                if pending.header_raw == record:
                    return None
                self._fail(key, "two different headers arrived for it", "conflicting_header")
            self._open(key, bytes(record))
            return None
        if pending is None:
            raise ReleaseIncompleteError(
                f"release {key}: {kind!r} record arrived without its header (the consumer "
                "started mid-release, or the header was lost)", "no_header"
            )
        if kind == "chunk":
            index = rec.get("index")
            if not is_field_int(index) or index >= pending.header.n_chunks:
                self._fail(key, f"chunk index ({index!r}) must lie in [0, n_chunks)",
                           "extra_chunk" if is_field_int(index) else "bad_chunk")
            held = pending.chunks.get(index)
            if held is None:
                pending.chunks[index] = bytes(record)
            elif held != record:
                self._fail(key, f"two different versions of chunk {index} arrived",
                           "conflicting_chunk")
            return None
        if kind != "end":
            self._fail(key, f"record `kind` ({kind!r}) must be 'header', 'chunk' or 'end'",
                       "bad_kind")
        del self._pending[key]
        missing = [i for i in range(pending.header.n_chunks) if i not in pending.chunks]
        if missing:
            raise ReleaseIncompleteError(
                f"release {key}: end record before {len(missing)} of "
                f"{pending.header.n_chunks} chunks: chunk {missing[0]} is missing; the release "
                "is discarded", "missing_chunks")
        ordered = [pending.chunks[i] for i in range(pending.header.n_chunks)]
        try:
            release = decode_release(
                [pending.header_raw, *ordered, record], max_depth=self.max_depth
            )
        except ReleaseIncompleteError as e:
            raise ReleaseIncompleteError(f"release {key}: {e}", e.reason) from None
        self._mark_assembled(key)
        return key, release

    def _open(self, key: ReleaseKey, raw: bytes) -> None:
        try:
            header = _parse_header(raw, max_depth=self.max_depth)
        except ReleaseIncompleteError as e:
            raise ReleaseIncompleteError(f"release {key}: {e}", e.reason) from None
        self._pending[key] = _Pending(raw, header)
        if len(self._pending) > self.max_pending:
            oldest = next(iter(self._pending))
            del self._pending[oldest]
            raise ReleaseIncompleteError(
                f"release {oldest} evicted incomplete: more than max_pending "
                f"({self.max_pending}) releases were open at once; raise max_pending", "evicted"
            )

    def _fail(self, key: ReleaseKey, reason: str, code: str) -> NoReturn:
        self._pending.pop(key, None)
        raise ReleaseIncompleteError(f"release {key}: {reason}; the release is discarded", code)

    def _is_assembled(self, key: ReleaseKey) -> bool:
        seen = self._seen.get((key.run_id, key.partition))
        return seen is not None and (key.sequence <= seen.floor or key.sequence in seen.sequences)

    def _mark_assembled(self, key: ReleaseKey) -> None:
        seen = self._seen.setdefault((key.run_id, key.partition), _Seen())
        seen.sequences.add(key.sequence)
        if len(seen.sequences) > 2 * self.remember:
            ordered = sorted(seen.sequences)
            seen.floor = max(seen.floor, ordered[-self.remember - 1])
            seen.sequences = set(ordered[-self.remember :])
