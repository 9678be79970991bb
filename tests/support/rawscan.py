"""A byte scanner for raw values and key material in what readers see (issue 44).

Our own tests' kit (not shipped). :func:`sentinel_needles` turns recognisable input values —
coordinates nobody would produce by chance, a user id, the noise key — into every byte string
they could take on their way out: float64 big- and little-endian (msgpack's float 64, Arrow
and numpy), msgpack's own encoding, the decimal text as written in the input, ``repr`` and 17
and 10 significant digits, each also for the value mapped to [0,1] by the schema; the user id's
UTF-8 bytes and its keyed hash (the state's key of the user's counts) in both byte orders and
hex; the key itself raw, in lowercase and uppercase hex, and the subkey of the user-id hash.
No path of dpsynth writes float32 (no ``float32`` in ``operators/dpsynth`` but a warning
filter), so float32 encodings are not searched: 4 bytes would meet random ones once per 2³²
bytes scanned per pattern, a false alarm with no leak behind it.

A :class:`Scan` looks for every needle in every blob it is given and keeps, per hit, where
(the output's name and the offset) and which encoding — never the bytes of a secret needle, so
a failure report never prints the key.

:func:`view_answers` runs ``dpsynth view`` as a subprocess and fetches every path its page
uses (``/``, ``/index.html``, ``/view.js``, ``/view.css``, ``/api/state``: the routes of
``dpsynth/view/server.py``), headers and bodies.

Example::

    scan = Scan(sentinel_needles(schema, values, user="zq-sentinel-7781", key=key))
    scan.add("synthetic topic p0@12 value", record.value)
    scan.assert_clean()
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from dpsynth.bounding.ids import HASH_CONTEXT, UserHasher
from dpsynth.noise import KeyedNoise
from dpsynth.schema import Schema

#: Coordinates nobody produces by chance (13 significant digits), inside every test's bounds.
SENTINEL_X_TEXT, SENTINEL_Y_TEXT = "0.1234567891234", "0.8765432198765"
#: A user id nobody produces by chance.
SENTINEL_USER = "zq-sentinel-7781"
#: A schema whose bounds put the sentinels inside and map them to other values in [0,1].
SENTINEL_SCHEMA = {"version": 1, "user_column": "uid", "columns": [
    {"name": "x", "lower": -2.0, "upper": 3.0}, {"name": "y", "lower": -1.0, "upper": 4.0}]}


@dataclass(frozen=True)
class Needle:
    """One encoding of one recognisable value: its description and its bytes."""

    name: str
    data: bytes
    secret: bool = False


@dataclass(frozen=True)
class Hit:
    """A needle found: in which output, at which byte offset, which encoding."""

    where: str
    offset: int
    needle: str

    def __str__(self) -> str:
        return f"{self.needle} in {self.where} at byte {self.offset}"


def _float_needles(label: str, value: float, texts: Iterable[str] = ()) -> list[Needle]:
    spelled = [*texts, repr(value), f"{value:.17g}", f"{value:.10g}"]
    return [Needle(f"{label} as float64 big-endian", struct.pack(">d", value)),
            Needle(f"{label} as float64 little-endian", struct.pack("<d", value)),
            Needle(f"{label} as msgpack float 64", msgpack.packb(value)),
            *(Needle(f"{label} as text {text!r}", text.encode())
              for text in dict.fromkeys(spelled))]


def sentinel_needles(schema: Schema, values: Mapping[str, str], *, user: str | None = None,
                     key: bytes | None = None) -> list[Needle]:
    """Every encoding of the sentinel ``values`` (column → decimal text as written in the
    input), of ``user`` and of ``key``; the schema maps each value to [0,1] too."""
    record = {name: float(text) for name, text in values.items()}
    filled = {name: record.get(name, (c.lower + c.upper) / 2)
              for name, c in zip(schema.names, schema.columns, strict=True)}
    unit, _ = schema.to_unit([filled])
    needles: list[Needle] = []
    for i, name in enumerate(schema.names):
        if name in values:
            needles += _float_needles(f"{name} (input units)", record[name], [values[name]])
            needles += _float_needles(f"{name} (mapped to [0,1])", float(unit[0, i]))
    if user is not None:
        needles.append(Needle("the user id as UTF-8", user.encode()))
    if key is not None:
        needles += [Needle("the noise key (raw 32 bytes)", key, True),
                    Needle("the noise key as lowercase hex", key.hex().encode(), True),
                    Needle("the noise key as uppercase hex", key.hex().upper().encode(), True)]
        noise = KeyedNoise(key)
        subkey = noise.subkey(HASH_CONTEXT).astype("<u4").tobytes()  # HMAC(key, context)
        needles += [Needle("the user-id hash subkey (raw)", subkey, True),
                    Needle("the user-id hash subkey as hex", subkey.hex().encode(), True)]
        if user is not None:
            hashed = UserHasher(noise).hash([user.encode()])[0]
            for order in ("<", ">"):
                data = hashed.astype(f"{order}u8").tobytes()
                endian = "little" if order == "<" else "big"
                needles += [Needle(f"the user id's keyed hash, {endian}-endian", data, True),
                            Needle(f"the user id's keyed hash, {endian}-endian hex",
                                   data.hex().encode(), True)]
    assert len({n.data for n in needles}) == len(needles), "two encodings coincide"
    return needles


@dataclass
class Scan:
    """Every needle searched in every blob added: the hits, and how much was scanned."""

    needles: Sequence[Needle]
    hits: list[Hit] = field(default_factory=list)
    bytes_scanned: int = 0
    outputs: list[str] = field(default_factory=list)

    def add(self, where: str, data: bytes | None) -> None:
        """Scan ``data`` (None: nothing), naming it ``where`` in hits."""
        if not data:
            return
        self.outputs.append(where)
        self.bytes_scanned += len(data)
        for needle in self.needles:
            at = data.find(needle.data)
            while at >= 0:
                self.hits.append(Hit(where, at, needle.name))
                at = data.find(needle.data, at + 1)

    def add_file(self, path: Path, root: Path) -> None:
        """Scan a file, named by its path under ``root``."""
        self.add(f"file {path.relative_to(root)}", path.read_bytes())

    def found(self) -> set[str]:
        """The names of the needles found somewhere."""
        return {hit.needle for hit in self.hits}

    def assert_clean(self, *, min_bytes: int = 1) -> None:
        """No needle anywhere, and at least ``min_bytes`` scanned (the scan is not vacuous)."""
        print(f"scanned {self.bytes_scanned} bytes in {len(self.outputs)} outputs "
              f"for {len(self.needles)} encodings")
        assert self.bytes_scanned >= min_bytes, (
            f"only {self.bytes_scanned} bytes scanned in {len(self.outputs)} outputs")
        shown = "\n".join(map(str, self.hits[:40]))
        assert not self.hits, (f"{len(self.hits)} raw values or key material found in "
                               f"{self.bytes_scanned} bytes of outputs:\n{shown}")


def sentinel_rows(n: int, every: int, seed: int, schema: Schema,
                  users: int = 40) -> list[tuple[str, str, str]]:
    """``n`` rows (user, x text, y text): every ``every``-th the sentinel user at the sentinel
    coordinates, every ``every``-th + 1 another user at them too (the values count beyond
    the sentinel user's bound), the rest uniform in the schema's bounds (public test data)."""
    rng = np.random.default_rng(seed)
    x, y = schema.columns[0], schema.columns[1]
    rows = []
    for i in range(n):
        if i % every == 0:
            rows.append((SENTINEL_USER, SENTINEL_X_TEXT, SENTINEL_Y_TEXT))
        elif i % every == 1:
            rows.append((f"u{rng.integers(users)}", SENTINEL_X_TEXT, SENTINEL_Y_TEXT))
        else:
            rows.append((f"u{rng.integers(users)}", f"{rng.uniform(x.lower, x.upper):.6f}",
                         f"{rng.uniform(y.lower, y.upper):.6f}"))
    return rows


def assert_planted_found(needles: Sequence[Needle], carrier: bytes) -> None:
    """The scanner's own proof that it can fail: each needle planted inside ``carrier`` (a real
    output's bytes) is reported, at the offset where it was planted."""
    assert carrier, "no carrier"
    at = len(carrier) // 2
    for needle in needles:
        scan = Scan([needle])
        scan.add("planted", carrier[:at] + needle.data + carrier[at:])
        assert Hit("planted", at, needle.name) in scan.hits, needle.name


#: The paths the page of ``dpsynth view`` fetches (dpsynth/view/server.py's routes).
VIEW_PATHS = ("/", "/index.html", "/view.js", "/view.css", "/api/state")


def view_answers(args: Sequence[str], ready: Callable[[dict[str, Any]], bool],
                 env: Mapping[str, str] | None = None,
                 timeout_s: float = 60) -> dict[str, bytes]:
    """Run ``dpsynth view ARGS --port 0``; once ``ready(/api/state)`` holds, every path of
    :data:`VIEW_PATHS` as served (status line, headers and body) and the command's standard
    output; the process is stopped before returning."""
    with subprocess.Popen(  # noqa: S603 - our interpreter and module
            [sys.executable, "-m", "dpsynth", "view", *args, "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=None if env is None else {**env}) as proc:
        try:
            return _fetch_all(proc, ready, timeout_s)
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _fetch_all(proc: subprocess.Popen[bytes], ready: Callable[[dict[str, Any]], bool],
               timeout_s: float) -> dict[str, bytes]:
    assert proc.stdout is not None
    first = b""
    while b"http://" not in first:  # the address line (a warning may come first)
        line = proc.stdout.readline()
        assert line, first + proc.stdout.read()
        first += line
    url = "http://" + first.split(b"http://", 1)[1].split()[0].decode().rstrip("/")

    def get(path: str) -> tuple[bytes, bytes]:
        with urllib.request.urlopen(url + path, timeout=10) as r:  # noqa: S310 - local
            return f"{r.status} {r.reason}\n{r.headers}".encode(), r.read()

    deadline = time.monotonic() + timeout_s
    while not ready(json.loads(get("/api/state")[1])):
        assert time.monotonic() < deadline, f"dpsynth view not ready in {timeout_s} s"
        time.sleep(0.2)
    answers = {"standard output": first}
    for path in VIEW_PATHS:
        head, body = get(path)
        answers[f"GET {path} headers"] = head
        answers[f"GET {path} body"] = body
    return answers
