"""Tick markers: public time written into the input partitions (docs/design.md D3).

Layer: adapter. Every ``DPSYNTH_TICK_SECONDS`` (P) the worker that owns an input partition
writes one *tick marker* into it. The marker is a message of the raw-events topic like any
record, so it sits at one offset between the records: every reader — the live worker, a replay
after a crash, a second run over the same topic — sees the same records before and after it,
hence the same steps (docs/privacy.md P11). A marker is the msgpack map

    {"__dpsynth_tick__": 1, "run_id": ..., "partition": p, "at_ms": period start, "tag": ...}

``at_ms`` is the start of the wall-clock period, ⌊now/P⌋·P in milliseconds: every marker of a
period carries the same value, so a marker written twice (two owners during a rebalance, a
restarted worker) ends one step, not two — a marker whose ``at_ms`` is not later than the last
applied one is skipped. ``tag`` is an HMAC (16 bytes) of (run, partition, at_ms) under a subkey
of the run's noise key: only the run's workers can write markers it accepts, so a producer of
raw events cannot move step boundaries, and markers of another run in the same topic are
skipped. Markers are never counted as records and never dead-lettered; they advance the
watermark like records (the commit protocol is unchanged).
"""

from __future__ import annotations

import hashlib
import hmac
import math
from dataclasses import dataclass
from typing import Any

import msgpack

#: The reserved key that makes a raw-events message a tick marker.
MARKER_KEY = "__dpsynth_tick__"
_MARKER_BYTES = MARKER_KEY.encode()
_TAG_LABEL = b"dpsynth/tick-marker/v1"
_TAG_BYTES = 16


@dataclass(frozen=True)
class Marker:
    """One decoded tick marker."""

    run_id: str
    partition: int
    at_ms: int
    tag: bytes


def period_start_ms(now_s: float, period_s: float) -> int:
    """Start of the wall-clock period holding ``now_s``, in ms: ⌊now/P⌋·P.

    >>> period_start_ms(125.3, 60.0), period_start_ms(125.3, 0.5)
    (120000, 125000)
    """
    return int(math.floor(now_s / period_s) * round(period_s * 1000))


class MarkerKey:
    """Signs and checks the markers of one run (the run key's subkey never leaves it)."""

    def __init__(self, noise_key: bytes, run_id: str) -> None:
        self._key = hmac.new(noise_key, _TAG_LABEL, hashlib.sha256).digest()
        self.run_id = run_id

    def tag(self, partition: int, at_ms: int) -> bytes:
        """The marker tag of (run, partition, period)."""
        body = msgpack.packb([self.run_id, int(partition), int(at_ms)], use_bin_type=True)
        return hmac.new(self._key, body, hashlib.sha256).digest()[:_TAG_BYTES]

    def encode(self, partition: int, at_ms: int) -> bytes:
        """The marker message of ``partition`` for the period starting at ``at_ms``."""
        return msgpack.packb({MARKER_KEY: 1, "run_id": self.run_id, "partition": int(partition),
                              "at_ms": int(at_ms), "tag": self.tag(partition, at_ms)},
                             use_bin_type=True)

    def accepts(self, marker: Marker, partition: int) -> bool:
        """True for a marker of this run and partition with a valid tag."""
        return (marker.run_id == self.run_id and marker.partition == partition  # privacy: P11
                and hmac.compare_digest(marker.tag, self.tag(partition, marker.at_ms)))


def parse_marker(value: bytes | None) -> Marker | None:
    """The marker in ``value``, or None for anything else (a record, a batch, garbage).

    Cheap for records: a substring test on the first bytes before any decoding.
    """
    if not value or _MARKER_BYTES not in value[:24]:
        return None
    try:
        data: Any = msgpack.unpackb(value, raw=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
        return None
    if not isinstance(data, dict) or data.get(MARKER_KEY) != 1:
        return None
    run_id, partition, at_ms, tag = (data.get(k) for k in ("run_id", "partition", "at_ms", "tag"))
    if not (isinstance(run_id, str) and isinstance(partition, int)
            and isinstance(at_ms, int) and isinstance(tag, bytes)):
        return None
    return Marker(run_id, partition, at_ms, tag)
