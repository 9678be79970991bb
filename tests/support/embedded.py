"""The embedded engine's releases for comparison with the worker's, and an in-memory sink.

Our own tests' kit (not shipped): what the worker must reproduce byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.release import (
    DEFAULT_MAX_CHUNK_BYTES,
    Release,
    ReleaseAssembler,
    decode_release,
    encode_release,
)
from dpsynth.testing.kafka import TEST_KEY_HEX, TopicRecord


def embedded_release_records(
    points: np.ndarray,
    *,
    key_hex: str = TEST_KEY_HEX,
    epsilon: float,
    release_every: int,
    max_depth: int,
    run_id: str,
    partition: int,
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
    mechanism: str | None = None,
    neighbours: str = "replace",
    users: list[Any] | None = None,
    **options: Any,
) -> dict[int, list[bytes]]:
    """sequence → encoded records of every release the embedded engine makes on ``points``.

    ``mechanism`` None: the synthesizer's default, as the worker without DPSYNTH_MECHANISM;
    ``users`` and ``options`` (``privacy_unit``, ``max_contributions``…): the privacy unit.
    """
    extra: dict[str, Any] = {"neighbours": neighbours, **options}
    if mechanism is not None:
        extra["mechanism"] = mechanism
    synth = OnlineSynthesizer(
        points.shape[1], epsilon, bytes.fromhex(key_hex), release_every,
        max_depth=max_depth, partition=partition, **extra,
    )
    out = {}
    for release in synth.extend(points, users=users):
        sequence = int(release.metadata["sequence"])
        out[sequence] = encode_release(
            release, run_id=run_id, partition=partition, sequence=sequence,
            max_chunk_bytes=max_chunk_bytes,
        )
    return out


class MemorySink:
    """An in-memory broker behind one partition's transactional producer (our test kit).

    Kafka's transaction semantics: records sent between :meth:`begin` and :meth:`commit` become
    visible together (:attr:`delivered`, :meth:`records`: what a ``read_committed`` reader
    sees) with the input offset of the commit (:attr:`group_offset`); an aborted or crashed
    transaction's records are in :attr:`sent` only (what a ``read_uncommitted`` reader would
    see). A record sent outside a transaction (a tick marker) is delivered at once.
    ``fail = True`` makes the next flush or commit lose the transaction and raise, as an
    unreachable broker; :meth:`crash` loses the open transaction, as a killed process.
    """

    def __init__(self) -> None:
        self.delivered: dict[str, list[tuple[bytes, bytes | None]]] = {}
        self.sent: list[tuple[str, bytes, bytes | None, int | None]] = []  # every send
        self.partitions: dict[str, list[int | None]] = {}  # delivered records' partitions
        self.group_offset: int | None = None  # the input offset committed with the output
        self.transactions = 0
        self.aborted = 0
        self.fail = False
        self._open: list[tuple[str, bytes, bytes | None, int | None]] | None = None

    def begin(self) -> None:
        """Begin a transaction."""
        assert self._open is None, "a transaction is open already"
        self._open = []

    def send(self, topic: str, key: bytes, value: bytes | None,
             partition: int | None = None) -> None:
        """Queue one record in the open transaction, or deliver it (no transaction open)."""
        record = (topic, key, value, partition)
        self.sent.append(record)
        if self._open is None:
            self._deliver([record])
        else:
            self._open.append(record)

    def flush(self) -> None:
        """The records are "on the broker" (or lost, when ``fail`` is set)."""
        if self.fail:
            self._open = None
            raise OSError("broker unreachable")

    def commit(self, offset: int | None) -> None:
        """Make the open transaction's records visible and commit ``offset``."""
        self.flush()
        assert self._open is not None, "no transaction open"
        self._deliver(self._open)
        self._open = None
        self.transactions += 1
        if offset is not None:
            self.group_offset = offset

    def abort(self) -> None:
        """Drop the open transaction."""
        if self._open is not None:
            self.aborted += 1
        self._open = None

    def crash(self) -> None:
        """A crash: the open transaction is aborted (by the next owner's fencing)."""
        self.abort()

    def _deliver(self, records: list[tuple[str, bytes, bytes | None, int | None]]) -> None:
        for topic, key, value, partition in records:
            self.delivered.setdefault(topic, []).append((key, value))
            self.partitions.setdefault(topic, []).append(partition)

    def records(self, topic: str) -> list[TopicRecord]:
        """The committed records of ``topic`` as if read back from partition 0."""
        return [TopicRecord(0, i, k, v) for i, (k, v) in enumerate(self.delivered.get(topic, []))]

    def uncommitted(self, topic: str) -> list[TopicRecord]:
        """Every record ever sent to ``topic``, aborted ones too (``read_uncommitted``)."""
        mine = [(k, v) for t, k, v, _ in self.sent if t == topic]
        return [TopicRecord(0, i, k, v) for i, (k, v) in enumerate(mine)]


def check_release_record(
    r: TopicRecord, expected_sets: dict[tuple[int, int], set[bytes]], run_id: str
) -> tuple[int, int]:
    """Assert one synthetic-topic record belongs to ``run_id`` and equals, byte for byte, a
    record of the embedded release its key names; returns that (partition, sequence)."""
    assert r.key is not None and r.value is not None, f"record {r.offset} has no key/value"
    run, partition, sequence = r.key.decode().rsplit("/", 2)
    slot = (int(partition), int(sequence))
    assert run == run_id, f"record of another run {run!r}"
    assert slot in expected_sets, f"unexpected release {slot} at {r.partition}:{r.offset}"
    assert r.value in expected_sets[slot], (
        f"record at {r.partition}:{r.offset} of release {slot} differs from the embedded "
        "engine's (a differently-noised or corrupt duplicate)"
    )
    return slot


def check_against_embedded(
    records: list[TopicRecord], expected: Mapping[tuple[int, int], list[bytes]], run_id: str
) -> dict[str, int]:
    """Check a synthetic topic against the embedded engine's encoded releases.

    ``expected`` maps (input partition, sequence) → the embedded release's records. Asserts:
    every record on the topic is byte-identical to a record of the expected release its key
    names (so a duplicate is a byte-identical copy); reassembling the topic in order yields
    every expected release exactly once and nothing else. Returns counts (records, duplicates).
    """
    expected_sets = {k: set(v) for k, v in expected.items()}
    seen: dict[bytes, int] = {}
    for r in records:
        check_release_record(r, expected_sets, run_id)
        seen[r.value] = seen.get(r.value, 0) + 1
    assembler = ReleaseAssembler()
    got: dict[tuple[int, int], Release] = {}
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        try:
            done = assembler.add_keyed(r.value)
        except ValueError:
            continue  # a partial release before a retry (mid-release crash), rejected
        if done is not None:
            key, release = done
            slot = (key.partition, key.sequence)
            assert slot not in got, f"release {slot} assembled twice"
            got[slot] = release
    assert sorted(got) == sorted(expected), (
        f"releases assembled {len(got)} != expected {len(expected)}; missing "
        f"{sorted(set(expected) - set(got))[:5]}, extra {sorted(set(got) - set(expected))[:5]}"
    )
    for slot, release in got.items():
        assert release == decode_release(expected[slot]), f"release {slot} differs"
    return {
        "records": len(records),
        "duplicates": sum(n - 1 for n in seen.values()),
        "releases": len(got),
    }


def crash_then_restart(open_processor: Any, sink: MemorySink, messages: list[Any], *,
                       crash_at: tuple[str, int], crash: type[BaseException],
                       batch: int) -> Any:
    """Feed ``messages`` in batches to a processor armed to crash at ``crash_at`` (the crash
    action raises ``crash``), abort the open transaction, then open a new processor on the same
    store (with a replay of ``messages``) and feed it again from the offset committed with the
    output, as Kafka re-delivers; returns the restarted processor (the caller closes it).

    ``open_processor(sink, crash_at, replay)`` makes a processor."""
    def replay(partition: int, start: int, end: int) -> Any:
        return iter(messages[start:end])

    proc = open_processor(sink, crash_at, None)
    try:
        for i in range(0, len(messages), batch):
            proc.process(messages[i:i + batch])
    except crash:
        pass
    else:
        raise AssertionError(f"the crash point {crash_at} was never reached")
    sink.crash()
    proc.close()
    restarted = open_processor(sink, None, replay)
    start = sink.group_offset or 0
    # the state is only ever committed after the transaction that covers it
    assert restarted.committed <= start - 1, "the state is ahead of the group's offset"
    for i in range(start, len(messages), batch):
        restarted.process(messages[i:i + batch])
    return restarted
