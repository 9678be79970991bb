"""What a topic holds, told by its records: releases, raw events (with tick markers), dead letters.

Layer: adapter (msgpack only). ``dpsynth topics export`` names in the recording's header the role
of the topic it recorded and, where the records say it, the run: a release record carries its
run id, and a release header its public parameters (ε, neighbour notion, mechanism, key
fingerprint — all published with every release); a tick marker in the raw-events topic carries
the run id of the worker that wrote it. Nothing else of a record is copied into the header.

>>> import msgpack
>>> marker = msgpack.packb({MARKER_KEY: 1, "run_id": "run-a", "partition": 0, "at_ms": 0})
>>> describe([msgpack.packb({"x": 0.5}), marker])
Content(role='raw', run_id='run-a', release=None)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import msgpack

#: The reserved key of a tick marker (``dpsynth.stream.ticks.MARKER_KEY``; a test keeps them
#: equal: this layer may not import the worker's).
MARKER_KEY = "__dpsynth_tick__"
#: What the values of each role are, for the header's ``values``.
VALUES = {
    "synthetic": "dpsynth release records, msgpack (schemas/release.v1.json)",
    "raw": "raw events, msgpack: a map or an array of maps; and dpsynth tick markers",
    "dead-letter": "dpsynth dead letters, msgpack, format 3 (docs/operator.md)",
    "other": None,
}
_RELEASE_KINDS = frozenset(("header", "chunk", "end"))
#: The keys every dead letter carries, by its ``format`` (1: the whole payload in ``raw``; 2, since
#: issue 15: bounded, its length, an unsalted SHA-256 and an optional prefix; 3, since issue 44:
#: a keyed HMAC-SHA256 instead — dpsynth.stream.codecs). Older formats still classify: a topic
#: keeps the letters written before an upgrade.
_DEAD_LETTER_KEYS: dict[object, frozenset[str]] = {  # by the record's "format" (any value)
    1: frozenset(("format", "topic", "partition", "offset", "reason", "raw")),
    2: frozenset(("format", "topic", "partition", "offset", "reason", "length", "sha256")),
    3: frozenset(("format", "topic", "partition", "offset", "reason", "length", "hmac_sha256",
                  "key_fingerprint")),
}
#: Header metadata copied into a recording's ``release`` (public: every release carries them).
_RELEASE_METADATA = ("epsilon", "neighbours", "schedule", "method", "key_fingerprint")


class Content(NamedTuple):
    """A topic's role, its run id (when the records name one) and its first release's
    public parameters (synthetic topics)."""

    role: str
    run_id: str | None
    release: dict[str, Any] | None


def _decoded(value: bytes | None) -> Any:
    if not value:
        return None
    try:
        return msgpack.unpackb(value, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None


def classify(value: bytes | None) -> tuple[str, dict[str, Any] | None]:
    """The role one record suggests, and the map it decoded to when that map names a run."""
    data = _decoded(value)
    if isinstance(data, dict):
        if data.get("kind") in _RELEASE_KINDS and isinstance(data.get("run_id"), str):
            return "synthetic", data
        if MARKER_KEY in data:
            return "raw", data
        if _DEAD_LETTER_KEYS.get(data.get("format"), {"?"}) <= data.keys():
            return "dead-letter", None
        return "raw", None
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
        return "raw", None
    return "other", None


def release_summary(header: dict[str, Any]) -> dict[str, Any]:
    """The public parameters of a release header worth naming in a recording's header."""
    metadata = header.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
    summary = {"format": header.get("format"), "d": header.get("d")}
    summary |= {k: metadata[k] for k in _RELEASE_METADATA if k in metadata}
    if "schedule" in summary:  # the release metadata's name for the mechanism (format 1)
        summary["mechanism"] = summary.pop("schedule")
    return {k: v for k, v in summary.items() if v is not None}


def describe(values: Iterable[bytes | None], *, role: str = "auto",
             run_id: str | None = None) -> Content:
    """Role, run id and release parameters told by ``values`` (the first records of a topic).

    ``role`` other than ``"auto"`` is taken as given; ``run_id`` too. A synthetic topic is
    one whose records are release records; a raw one holds msgpack maps (or arrays of maps)
    and tick markers; a dead-letter one dead letters. Anything else is ``"other"``.
    """
    seen: dict[str, int] = {}
    release: dict[str, Any] | None = None
    for value in values:
        kind, data = classify(value)
        seen[kind] = seen.get(kind, 0) + 1
        if data is None or (role not in ("auto", kind)):
            continue
        run_id = run_id or data.get("run_id")
        if release is None and data.get("kind") == "header":
            release = release_summary(data)
    if role == "auto":  # the most frequent recognised kind
        known = {k: n for k, n in seen.items() if k != "other"}
        role = max(known, key=known.__getitem__) if known else "other"
    return Content(role, run_id, release if role == "synthetic" else None)
