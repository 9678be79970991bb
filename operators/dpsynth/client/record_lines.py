"""The record lines of a topic recording: one Kafka record ↔ one JSON object (version 1).

Layer: adapter (no I/O). ``{"partition", "offset", "timestamp", "timestamp_type", "key",
"value", "headers"}`` in this order; bytes as standard base64 (``null`` for null), headers as
``[name, base64 or null]`` pairs in their order (``schemas/recording.v1.json``). The files
around the lines — header, end line, compression — are :mod:`~dpsynth.client.recording`'s.

>>> print(record_line(TopicRecord(0, 5, None, b"v", 1767225600000, "CreateTime")).decode())
{"partition":0,"offset":5,"timestamp":1767225600000,...,"key":null,"value":"dg==","headers":[]}
<BLANKLINE>
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections import Counter
from operator import itemgetter
from typing import Any, NamedTuple

from dpsynth.errors import DpsynthError

#: Kafka's timestamp types, by the names of its Java client.
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime", "NoTimestampType")
_KINDS = frozenset(TIMESTAMP_TYPES)
_b64encode, _a2b = base64.b64encode, binascii.a2b_base64
_new_record = tuple.__new__  # a NamedTuple without its Python-level __new__
#: A whole record line exactly as :func:`record_line` writes it, without headers: such lines
#: (nearly all) are parsed by one regular expression per batch instead of the JSON parser.
_CANONICAL = re.compile(
    rb'^\{"partition":(\d+),"offset":(-?\d+),"timestamp":(-?\d+),'
    rb'"timestamp_type":"(CreateTime|LogAppendTime|NoTimestampType)",'
    rb'"key":(?:(null)|"([A-Za-z0-9+/]*={0,2})"),'
    rb'"value":(?:(null)|"([A-Za-z0-9+/]*={0,2})"),'
    rb'"headers":\[\]\}$', re.MULTILINE)
_KIND_NAMES = {kind.encode(): kind for kind in TIMESTAMP_TYPES}
_first = itemgetter(0)


class RecordingError(DpsynthError, ValueError):
    """A recording cannot be read or written; the message names the line and the fix."""


class TopicRecord(NamedTuple):
    """One record of a topic: where it was, its bytes, its timestamp and headers."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int = -1
    timestamp_type: str = "NoTimestampType"
    headers: tuple[tuple[str, bytes | None], ...] = ()



def _b64(data: bytes | None) -> str:
    return "null" if data is None else f'"{_b64encode(data).decode("ascii")}"'


def record_line(record: TopicRecord) -> bytes:
    """One record as its line (fixed key order, base64 bytes)."""
    partition, offset, key, value, timestamp, kind, headers = record
    if kind not in TIMESTAMP_TYPES:
        raise RecordingError(f"timestamp_type ({kind!r}) must be one of "
                             f"{', '.join(TIMESTAMP_TYPES)}")
    encoded = ("[]" if not headers else
               "[" + ",".join(f"[{json.dumps(str(n))},{_b64(v)}]" for n, v in headers) + "]")
    return (f'{{"partition":{int(partition)},"offset":{int(offset)},'
            f'"timestamp":{int(timestamp)},"timestamp_type":"{kind}",'
            f'"key":{_b64(key)},"value":{_b64(value)},"headers":{encoded}}}\n').encode()


def _bytes(text: Any, where: str) -> bytes | None:
    if text is None:
        return None
    try:
        return _a2b(text, strict_mode=True)
    except (binascii.Error, TypeError, ValueError):
        raise RecordingError(f"{where} must be base64 text or null") from None


def _record(body: Any, line_no: int) -> TopicRecord:
    """A record line's object as a :class:`TopicRecord`, or a RecordingError naming the line."""
    where = f"line {line_no}"
    if isinstance(body, dict) and "kind" in body:
        raise RecordingError(f"{where}: a {body['kind']!r} line among the records (the header "
                             "is the first line, the end line the last)")
    try:
        partition, offset = body["partition"], body["offset"]
        timestamp, kind, headers = body["timestamp"], body["timestamp_type"], body["headers"]
        key, value = body["key"], body["value"]
    except (KeyError, TypeError):
        raise RecordingError(f"{where}: a record needs partition, offset, timestamp, "
                             "timestamp_type, key, value and headers") from None
    if type(partition) is not int or partition < 0 or type(offset) is not int:
        raise RecordingError(f"{where}: partition and offset must be integers, partition >= 0")
    if type(timestamp) is not int or kind not in TIMESTAMP_TYPES:
        raise RecordingError(f"{where}: timestamp must be an integer (ms) and timestamp_type "
                             f"one of {', '.join(TIMESTAMP_TYPES)}")
    pairs: tuple[tuple[str, bytes | None], ...] = ()
    if headers:
        if not isinstance(headers, list) or not all(
                isinstance(h, list) and len(h) == 2 and isinstance(h[0], str) for h in headers):
            raise RecordingError(f"{where}: headers must be a list of [name, base64 or null]")
        pairs = tuple((n, _bytes(v, f"{where}: header {n!r}")) for n, v in headers)
    return _new_record(TopicRecord, (partition, offset, _bytes(key, f"{where}: key"),
                                     _bytes(value, f"{where}: value"), timestamp, kind, pairs))


def decode_records(bodies: list[Any], first: int) -> list[TopicRecord]:
    """Record lines' objects as records; the common case (no headers) inline, for speed
    (the import is bounded by this loop), anything else by :func:`_record`.
    """
    out: list[TopicRecord] = []
    append, a2b, make, kinds = out.append, _a2b, _new_record, _KINDS
    for i, body in enumerate(bodies):
        try:
            partition, offset, key, value = (body["partition"], body["offset"], body["key"],
                                             body["value"])
            timestamp, kind = body["timestamp"], body["timestamp_type"]
            if (body["headers"] or type(partition) is not int or partition < 0
                    or type(offset) is not int or type(timestamp) is not int
                    or kind not in kinds):
                raise ValueError
            append(make(TopicRecord, (
                partition, offset, None if key is None else a2b(key, strict_mode=True),
                None if value is None else a2b(value, strict_mode=True), timestamp, kind, ())))
        except (KeyError, TypeError, ValueError):  # binascii.Error is a ValueError
            append(_record(body, first + i))
    return out


def canonical_records(chunk: bytes) -> tuple[list[TopicRecord], Counter[int]] | None:
    """The records of ``chunk`` (whole lines) and their count per partition, when every line
    is in the writer's own layout without headers — the import's fast path, faster than JSON
    (docs/benchmarks.md, "Topic recordings"); None otherwise (the caller then parses the
    lines as JSON, naming a bad line)."""
    found = _CANONICAL.findall(chunk)
    if len(found) != chunk.count(b"\n") + (not chunk.endswith(b"\n")):
        return None
    a2b, make, kinds = _a2b, _new_record, _KIND_NAMES
    try:
        records = [make(TopicRecord, (
            int(p), int(o), None if key_null else a2b(key, strict_mode=True),
            None if value_null else a2b(value, strict_mode=True), int(t), kinds[kind], ()))
            for p, o, t, kind, key_null, key, value_null, value in found]
    except ValueError:  # bad base64 padding: let the JSON path name the line
        return None
    counts = Counter(map(_first, found))
    return records, Counter({int(p): n for p, n in counts.items()})
