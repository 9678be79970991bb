"""Topic recordings: every record of a Kafka topic in one streamable file (format version 1).

Layer: adapter (files only; the broker side is :mod:`~dpsynth.client.transfer`). A recording is
gzip-compressed NDJSON (UTF-8, one JSON object per line; ``schemas/recording.v1.json``,
``schemas/README.md``):

1. a **header** ``{"kind": "header", "format": "dpsynth.recording", "version": 1, "schema",
   "topic", "partitions", "role", "run_id", "values", "sensitive", "release", "record_schema",
   "note"}`` naming the source topic, its run and what its values are;
2. one line per **record**, in the order they are to be written back: ``{"partition",
   "offset", "timestamp", "timestamp_type", "key", "value", "headers"}`` — bytes as base64
   (``null`` for a null key or value), headers as ``[name, base64 or null]`` pairs in order;
3. an **end** line ``{"kind": "end", "records", "per_partition"}``: a reader that does not
   reach it knows the file was cut.

The file streams: :class:`RecordingWriter` holds one line, :class:`RecordingReader` about
1 MiB of lines. A recording of the raw-events or dead-letter topic holds sensitive records
(``"sensitive": true``); one of the synthetic topic releases (ε-DP) only.

>>> import io
>>> out = io.BytesIO()
>>> header = RecordingHeader(topic="t", partitions=1)
>>> with RecordingWriter(out, header) as writer:
...     writer.write(TopicRecord(0, 0, b"k", b"v", 1767225600000, "CreateTime", (("h", b"1"),)))
>>> reader = RecordingReader(io.BytesIO(out.getvalue()))
>>> reader.header.topic, list(reader), reader.end.records
('t', [TopicRecord(partition=0, offset=0, key=b'k', value=b'v', timestamp=1767225600000, \
timestamp_type='CreateTime', headers=(('h', b'1'),))], 1)
"""

from __future__ import annotations

import gzip
import io
import json
import os
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import IO, Any

from dpsynth.client.record_lines import (
    TIMESTAMP_TYPES,
    RecordingError,
    TopicRecord,
    canonical_records,
    decode_records,
    record_line,
)

__all__ = [
    "FORMAT", "ROLES", "SCHEMA_ID", "TIMESTAMP_TYPES", "VERSION", "RecordingEnd",
    "RecordingError", "RecordingHeader", "RecordingReader", "RecordingWriter", "TopicRecord",
    "record_line",
]

FORMAT = "dpsynth.recording"
VERSION = 1
SCHEMA_ID = "https://dpsynth.dev/schemas/recording.v1.json"
#: What a recording's topic holds (``"auto"`` on export decides from the records).
ROLES = ("synthetic", "raw", "dead-letter", "other")
_GZIP_MAGIC = b"\x1f\x8b"
_READ_BYTES = 1 << 20


@dataclass(frozen=True)
class RecordingHeader:
    """The first line: the source topic, its run and what its records are.

    ``partitions`` is the source topic's partition count (an import needs at least as many);
    ``release`` the public parameters of the first release (ε, neighbours, mechanism, …) of a
    synthetic topic; ``record_schema`` the declared record schema (``schemas/``), when known.
    """

    topic: str
    partitions: int
    role: str = "other"
    run_id: str | None = None
    values: str | None = None
    release: Mapping[str, Any] | None = None
    record_schema: Mapping[str, Any] | None = None
    note: str | None = None
    sensitive: bool = field(default=False)

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise RecordingError(f"topic ({self.topic!r}) must be a non-empty string")
        if not isinstance(self.partitions, int) or self.partitions < 1:
            raise RecordingError(f"partitions ({self.partitions!r}) must be an integer >= 1")
        if self.role not in ROLES:
            raise RecordingError(f"role ({self.role!r}) must be one of {', '.join(ROLES)}")

    def to_line(self) -> bytes:
        """The header line (``kind``, ``format``, ``version`` and ``schema`` first)."""
        body = {"kind": "header", "format": FORMAT, "version": VERSION, "schema": SCHEMA_ID,
                **asdict(self)}
        return (json.dumps(body, ensure_ascii=False, sort_keys=False) + "\n").encode()

    @classmethod
    def from_line(cls, line: bytes) -> RecordingHeader:
        """Parse and check a header line; refuse other formats and versions."""
        try:
            body = json.loads(line)
        except ValueError:
            body = None
        if not isinstance(body, dict) or body.get("kind") != "header":
            raise RecordingError("line 1 is not a recording header: is this a dpsynth "
                                 "recording (dpsynth topics export)?")
        if body.get("format") != FORMAT:
            raise RecordingError(f"line 1: format {body.get('format')!r} is not {FORMAT!r}")
        if body.get("version") != VERSION:
            raise RecordingError(f"line 1: recording version {body.get('version')!r}; this "
                                 f"dpsynth reads version {VERSION} only (upgrade dpsynth)")
        fields = {k: v for k, v in body.items() if k not in ("kind", "format", "version")}
        fields.pop("schema", None)
        try:
            return cls(**fields)
        except TypeError as e:
            raise RecordingError(f"line 1: {e}; the header's fields are those of "
                                 "schemas/recording.v1.json") from None


@dataclass(frozen=True)
class RecordingEnd:
    """The last line: how many records the file holds, in all and per partition."""

    records: int
    per_partition: dict[int, int]


# -- writing --------------------------------------------------------------------------------


class RecordingWriter:
    """Writes a header, record lines and, on :meth:`close`, the end line.

    ``target`` is a path (gzip unless it ends in ``.ndjson``), ``"-"`` (standard output,
    gzip) or a binary stream (gzip). The file appears under its name only when complete: a
    path is written to a temporary name and renamed by :meth:`close`.
    """

    def __init__(self, target: str | os.PathLike[str] | IO[bytes], header: RecordingHeader,
                 *, compresslevel: int = 6) -> None:
        self.header = header
        self.counts: Counter[int] = Counter()
        self._final: str | None = None
        self._raw: IO[bytes] | None = None
        if isinstance(target, str | os.PathLike) and os.fspath(target) != "-":
            path = os.fspath(target)
            self._final, self._tmp = path, f"{path}.tmp-{os.getpid()}"
            self._raw = open(self._tmp, "wb")  # noqa: SIM115 - closed in close()
            sink: IO[bytes] = self._raw
            compress = not path.endswith(".ndjson")
        else:
            # a path-like "-" passes through too (and fails to write): IO[bytes] for the checker
            sink = sys.stdout.buffer if target == "-" else target  # type: ignore[assignment]
            compress = True
        self._out: IO[bytes] | gzip.GzipFile = (
            gzip.GzipFile(fileobj=sink, mode="wb", filename="", mtime=0,
                          compresslevel=compresslevel)
            if compress else sink)
        self._out.write(header.to_line())

    def write(self, record: TopicRecord) -> None:
        """Append one record."""
        self._out.write(record_line(record))
        self.counts[record.partition] += 1

    def close(self) -> RecordingEnd:
        """Write the end line, finish the compression and put the file in place."""
        end = RecordingEnd(sum(self.counts.values()), dict(sorted(self.counts.items())))
        line = {"kind": "end", "records": end.records,
                "per_partition": {str(p): n for p, n in end.per_partition.items()}}
        self._out.write((json.dumps(line) + "\n").encode())
        self._out.flush()
        if isinstance(self._out, gzip.GzipFile):
            self._out.close()
        if self._raw is not None:
            self._raw.flush()
            os.fsync(self._raw.fileno())
            self._raw.close()
            assert self._final is not None  # set with _raw
            os.replace(self._tmp, self._final)
        return end

    def abort(self) -> None:
        """Drop a file that will not be finished (the temporary file of a path)."""
        if self._raw is not None:
            self._raw.close()
            os.unlink(self._tmp)

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        self.close() if kind is None else self.abort()


# -- reading --------------------------------------------------------------------------------


class RecordingReader:
    """Reads a recording written by :class:`RecordingWriter` (or any tool that follows
    ``schemas/recording.v1.json``), gzip or plain, from a path, ``"-"`` or a binary stream.

    :attr:`header` is read at once; iterate (or :meth:`batches`) for the records, in file
    order; :attr:`end` is set when the end line has been read and checked. A file that stops
    before its end line, or whose counts disagree with it, raises :class:`RecordingError`.
    """

    def __init__(self, source: str | os.PathLike[str] | IO[bytes]) -> None:
        self._owned: IO[bytes] | None = None
        if isinstance(source, str | os.PathLike) and os.fspath(source) != "-":
            try:
                self._owned = open(source, "rb")  # noqa: SIM115 - closed in close()
            except OSError as e:
                raise RecordingError(f"cannot open the recording {os.fspath(source)!r}: "
                                     f"{e.strerror}") from None
            raw: IO[bytes] = self._owned
        else:
            # a path-like "-" passes through too (and fails to read): IO[bytes] for the checker
            raw = sys.stdin.buffer if source == "-" else source  # type: ignore[assignment]
        # a stream with readinto, which IO[bytes] does not declare (a file, BytesIO, a socket's)
        buffered = (raw if isinstance(raw, io.BufferedReader)
                    else io.BufferedReader(raw))  # type: ignore[type-var]
        compressed = buffered.peek(2)[:2] == _GZIP_MAGIC
        self._in: IO[bytes] | gzip.GzipFile = (gzip.GzipFile(fileobj=buffered, mode="rb")
                                               if compressed else buffered)
        self._rest = b""  # a line begun in the last chunk read
        self._line = 1
        self.end: RecordingEnd | None = None
        self.counts: Counter[int] = Counter()
        try:
            self.header = RecordingHeader.from_line(self._read(_READ_BYTES, 1, header=True))
        except RecordingError:
            self.close()
            raise

    def _read(self, size: int, number: int, *, header: bool = False) -> bytes:
        """The next whole lines (about ``size`` bytes; one line when ``header``)."""
        while True:
            try:
                chunk = self._in.read(size)
            except (OSError, EOFError, gzip.BadGzipFile) as e:
                raise RecordingError(f"after line {number}: the file is corrupt or cut "
                                     f"({e})") from None
            data = self._rest + chunk
            cut = data.find(b"\n") + 1 if header else data.rfind(b"\n") + 1
            if cut or not chunk:
                break
            self._rest = data
        if not cut:
            self._rest = b""
            return data if data.strip() else b""
        self._rest = data[cut:]
        return data[:cut]

    def batches(self, max_bytes: int = _READ_BYTES) -> Iterator[list[TopicRecord]]:
        """Records in file order, about ``max_bytes`` of lines at a time (a file opened
        here is closed at the end, or at the first error)."""
        try:
            while self.end is None:
                chunk = self._read(max_bytes, self._line)
                if not chunk:
                    raise RecordingError(
                        f"the recording ends after line {self._line} without its end line: it "
                        "was cut (an export that did not finish, or a partial copy); export it "
                        "again")
                yield self._decode(chunk)
        finally:
            self.close()

    def _decode(self, chunk: bytes) -> list[TopicRecord]:
        first = self._line + 1
        fast = canonical_records(chunk)
        if fast is not None:  # every line a record in the writer's layout
            out, counts = fast
            self._line += len(out)
            self.counts.update(counts)
            return out
        lines = chunk.splitlines()
        try:
            bodies = json.loads(b"[" + b",".join(lines) + b"]")
        except ValueError:
            bodies = [self._loads(line, first + i) for i, line in enumerate(lines)]
        last = bodies[-1]
        if isinstance(last, dict) and "kind" in last:  # the end line (else a record line)
            out = decode_records(bodies[:-1], first)
            self.counts.update(r.partition for r in out)
            self._finish(last, first + len(bodies) - 1)
            return out
        out = decode_records(bodies, first)
        self._line += len(lines)
        self.counts.update(r.partition for r in out)
        return out

    @staticmethod
    def _loads(line: bytes, number: int) -> Any:
        try:
            return json.loads(line)
        except ValueError:
            raise RecordingError(f"line {number} is not one JSON object") from None

    def _finish(self, body: dict[str, Any], number: int) -> None:
        per = body.get("per_partition")
        if body.get("kind") != "end" or not isinstance(per, dict):
            raise RecordingError(f"line {number}: only the first line is a header and the "
                                 "last the end line")
        if self._rest.strip() or self._in.read(256).strip():
            raise RecordingError(f"line {number}: the end line must be the last line")
        records: Any = body.get("records")  # any JSON value: compared with the count below
        end = RecordingEnd(records, {int(p): n for p, n in per.items()})
        counts = self.counts
        if end.records != sum(counts.values()) or end.per_partition != dict(counts):
            raise RecordingError(f"line {number}: the end line counts {end.records} records, "
                                 f"the file holds {sum(counts.values())}: it was edited or "
                                 "damaged; export it again")
        self.end = end

    def __iter__(self) -> Iterator[TopicRecord]:
        for batch in self.batches():
            yield from batch

    def close(self) -> None:
        """Close the file (a stream passed in is left open)."""
        if self._owned is not None:
            self._owned.close()

    def __enter__(self) -> RecordingReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
