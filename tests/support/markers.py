"""Tick markers in tests: writing them, and the embedded engines' releases over an input topic.

Our own tests' kit (not shipped). The worker's steps come from tick markers written into the
input partition at wall-clock times, so a test cannot know in advance where they fall; what it
can do is read the input partition afterwards and replay it, records and markers in offset
order, through the embedded synthesizer — the releases the worker must have published, byte
for byte (DESIGN §3 "Ticks": replays see the same steps).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

import msgpack
import numpy as np

from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import DEFAULT_MAX_CHUNK_BYTES, encode_release, encode_tabular_release
from dpsynth.schema import Schema
from dpsynth.stream.ticker import TickClock
from dpsynth.stream.ticks import MarkerKey, parse_marker
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.synthesizer import TabularSynthesizer
from dpsynth.testing.kafka import TEST_KEY_HEX

RUN_ID = "test-run"


class ManualClock(TickClock):
    """A marker writer's clock that moves only when the test says (:meth:`advance`); a wait
    returns once the clock reached its end, or at a wake (polled every few milliseconds)."""

    def __init__(self, start_s: float) -> None:
        self._now = float(start_s)
        self._lock = threading.Lock()

    def now(self) -> float:
        """The test's time."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock (a jump of several periods is a writer that fell behind)."""
        with self._lock:
            self._now += seconds

    def wait(self, seconds: float, wake: threading.Event) -> None:
        """Until this clock moved ``seconds`` on, or ``wake``."""
        due = self.now() + seconds
        while not wake.is_set() and self.now() < due:
            wake.wait(0.005)


def marker(partition: int, at_ms: int, *, run_id: str = RUN_ID,
           key_hex: str = TEST_KEY_HEX) -> bytes:
    """The tick marker a worker of ``run_id`` writes for the period starting at ``at_ms``."""
    return MarkerKey(bytes.fromhex(key_hex), run_id).encode(partition, at_ms)


def input_steps(values: Iterable[bytes | None], partition: int, *, run_id: str = RUN_ID,
                key_hex: str = TEST_KEY_HEX) -> Iterator[tuple[str, list[Any]]]:
    """``("records", [record, ...])`` per decodable message, ``("tick", [])`` per marker the
    run applies (its own, each period once, in order); other markers and garbage are skipped."""
    key = MarkerKey(bytes.fromhex(key_hex), run_id)
    last = -1
    for value in values:
        found = parse_marker(value)
        if found is not None:
            if key.accepts(found, partition) and found.at_ms > last:
                last = found.at_ms
                yield "tick", []
            continue
        try:
            data = msgpack.unpackb(value or b"", raw=False)
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            continue
        yield "records", data if isinstance(data, list) else [data]


def _drive(synth: Any, steps: Iterator[tuple[str, list[Any]]], rows: Any) -> list[Any]:
    releases: list[Any] = []
    for kind, records in steps:
        if kind == "tick":
            release = synth.tick()
            releases += [] if release is None else [release]
        elif synth.neighbours == "add_remove":
            synth.add(rows(records))
        else:
            releases += synth.extend(rows(records))
    return releases


def embedded_points_from_input(
    values: Iterable[bytes | None], schema: Schema, *, epsilon: float, release_every: int,
    max_depth: int, partition: int = 0, run_id: str = RUN_ID, key_hex: str = TEST_KEY_HEX,
    neighbours: str = "replace", mechanism: str = "auto",
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES, release_growth: float = 0.0,
) -> dict[int, list[bytes]]:
    """sequence → encoded records of the point engine's releases over an input partition."""
    synth = OnlineSynthesizer(schema.d, epsilon, bytes.fromhex(key_hex), release_every,
                              mechanism, max_depth, partition=partition, neighbours=neighbours,
                              release_growth=release_growth)
    releases = _drive(synth, input_steps(values, partition, run_id=run_id, key_hex=key_hex),
                      lambda records: schema.split_valid(records)[0])
    return {int(r.metadata["sequence"]): encode_release(
        r, run_id=run_id, partition=partition, sequence=int(r.metadata["sequence"]),
        max_chunk_bytes=max_chunk_bytes) for r in releases}


def embedded_tabular_from_input(
    values: Iterable[bytes | None], domain: Domain, *, epsilon: float, release_every: int,
    partition: int = 0, run_id: str = RUN_ID, key_hex: str = TEST_KEY_HEX,
    neighbours: str = "add_remove", max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
    **settings: Any,
) -> dict[int, list[bytes]]:
    """sequence → encoded records of the tabular engine's releases over an input partition."""
    synth = TabularSynthesizer(domain, epsilon, bytes.fromhex(key_hex),
                               release_every=release_every, partition=partition,
                               neighbours=neighbours, **settings)

    def rows(records: list[Any]) -> np.ndarray:
        codes, _ = domain.encode(records)
        return codes.reshape(-1, len(domain.sizes))

    releases = _drive(synth, input_steps(values, partition, run_id=run_id, key_hex=key_hex),
                      rows)
    return {int(r.sequence): encode_tabular_release(
        r, run_id=run_id, partition=partition, max_chunk_bytes=max_chunk_bytes)
        for r in releases}


# -- against a real broker ----------------------------------------------------------------------


def input_values(bootstrap: str, topic: str, partition: int = 0) -> list[bytes | None]:
    """The values of one input partition, in offset order (records and tick markers)."""
    from dpsynth.testing.kafka import read_topic

    return [r.value for r in sorted(read_topic(bootstrap, topic), key=lambda r: r.offset)
            if r.partition == partition]


def committed_watermark(data_dir: Any, partition: int = 0, run_id: str = RUN_ID) -> int:
    """The watermark a stopped worker committed for ``partition`` (−1: no state)."""
    from pathlib import Path

    from dpsynth.stream.store import PartitionStore

    with PartitionStore(Path(data_dir) / "state" / f"p{partition}", partition=partition,
                        run_id=run_id, sync=False) as store:
        state = store.load()
    return -1 if state is None else state.watermark


def counted_through(n: int, end_offset: int, partition: str = "0") -> Any:
    """A /metrics predicate: t = n and the committed watermark at or past ``end_offset``
    (a message after the data — a tick marker — was applied and committed)."""
    def predicate(m: dict[str, dict[str, float]]) -> bool:
        return (m.get("dpsynth_t", {}).get(partition) == n
                and m.get("dpsynth_watermark", {}).get(partition, -1) >= end_offset)
    return predicate


def expected_through(full: dict[tuple[int, int], list[bytes]],
                     committed: dict[tuple[int, int], list[bytes]],
                     records: list[Any]) -> dict[tuple[int, int], list[bytes]]:
    """The releases a stopped worker must have published: the reference over its whole input
    partition, cut after the highest sequence on the output topic, which must cover every
    release of the committed part of the input (markers after the last commit may or may not
    have been applied before the stop)."""
    published = {int(r.key.decode().rsplit("/", 1)[1]) for r in records if r.key}
    top = max(published, default=0)
    out = {k: v for k, v in full.items() if k[1] <= top}
    missing = sorted(set(committed) - set(out))
    assert not missing, f"releases of committed input missing from the topic: {missing[:5]}"
    return out


def expected_points_through(values: list[bytes | None], schema: Schema, committed_upto: int,
                            records: list[Any], **embedded: Any
                            ) -> dict[tuple[int, int], list[bytes]]:
    """:func:`expected_through` for the point engine on input partition 0: the embedded engine
    (:func:`embedded_points_from_input` with ``embedded``) over all of ``values`` and over its
    committed part ``values[:committed_upto]``."""
    def reference(upto: int) -> dict[tuple[int, int], list[bytes]]:
        return {(0, s): r for s, r in embedded_points_from_input(
            values[:upto], schema, **embedded).items()}

    return expected_through(reference(len(values)), reference(committed_upto), records)
