"""The state topic: every partition's state commits, so that a partition moves without its disk.

Layer: adapter (confluent-kafka for the reader only). Each state commit
(:class:`~dpsynth.stream.statelog.StateCommit`: a base or a delta) is also written to a
compacted topic (``DPSYNTH_STATE_TOPIC``, default ``<group id>-state``, partition p of the input
→ partition p mod its count), **in the release transaction** that commits the input offset it
covers: the state on the topic is exactly what the published releases were computed from.
Records, all keyed ``run_id/partition/state/…``:

- ``manifest``: msgpack ``{format, epoch, seq, base_length, base_chunks, base_digest, digest,
  sizes, watermark, t, sequence, config, last_tick_ms, latest_records}`` — rewritten by every
  commit (the newest one wins);
- ``base/<i>``: ``{epoch, index, data}``, the base snapshot in parts of :data:`PART_BYTES`,
  written when a new base is;
- ``delta/<seq>/<part>``: ``{epoch, seq, part, parts, data}``, delta ``seq`` of the epoch;
  a new base deletes the previous epoch's deltas with tombstones;
- ``user/<32 hex digits>`` (privacy unit "user"): a user's counts (:mod:`dpsynth.stream.
  usercodec`), written when they change; compaction keeps each user's newest.

:func:`restore` rebuilds a partition's newest committed state from these records (the newest
value of each key — what compaction keeps, so a partially compacted topic gives the same), in
time proportional to the state: the base, at most about as many bytes of deltas
(:data:`~dpsynth.stream.statelog.REBASE_RATIO`), the users, plus what the log cleaner has not
removed yet. The topic holds raw data — the open step's records at the tree's resolution, exact
counts, each user's exact count under its keyed hash: it needs the protection of the raw-events
topic.
"""

from __future__ import annotations

import hmac
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgpack

from dpsynth.bounding import UserCounts
from dpsynth.errors import StateCorruptError
from dpsynth.state_delta import snapshot_digest
from dpsynth.stream.codecs import output_partition
from dpsynth.stream.sink import watermarks
from dpsynth.stream.statelog import StateCommit, rebuild
from dpsynth.stream.usercodec import COUNT, decode_users, encode_users, hashes_of

log = logging.getLogger(__name__)

CHANGELOG_FORMAT = 1
#: Bytes of state per record (well under Kafka's default 1 MB message limit).
PART_BYTES = 512_000

Record = tuple[str, bytes, bytes | None, int | None]


@dataclass(frozen=True)
class Restored:
    """A partition's newest committed state, as read back from the state topic."""

    snapshot: bytes
    watermark: int
    t: int
    sequence: int
    config: dict[str, Any]
    last_tick_ms: int
    latest_records: int
    epoch: int
    seq: int
    sizes: tuple[int, ...]
    users: UserCounts | None
    records_read: int

    def commit(self) -> StateCommit:
        """The state as a base installed after delta ``seq`` (for the local store)."""
        return StateCommit(self.epoch, self.seq, self.snapshot, sizes=self.sizes)


def _prefix(run_id: str, partition: int) -> str:
    return f"{run_id}/{partition}/state/"


def _parts(size: int) -> int:
    return max(1, -(-size // PART_BYTES))


def state_records(topic: str, where: int, run_id: str, partition: int, commit: StateCommit,
                  meta: dict[str, Any], users: UserCounts | None,
                  base: dict[str, Any]) -> tuple[list[Record], dict[str, Any]]:
    """The records of one state commit (module docstring) and the description of the topic's
    base after it (``base``: the one before; a delta needs one — the processor writes a base
    first after every load). ``where``: the topic partition; ``meta``: the manifest's
    watermark, t, sequence, config, last_tick_ms, latest_records and sizes."""
    key = _prefix(run_id, partition)
    out: list[Record] = []

    def put(name: str, value: bytes | None) -> None:
        out.append((topic, (key + name).encode(), value, where))

    def pack(obj: dict[str, Any]) -> bytes:
        return msgpack.packb(obj, use_bin_type=True)

    if commit.is_base:
        snapshot = commit.snapshot
        for index in range(_parts(len(snapshot))):
            put(f"base/{index}", pack({
                "epoch": commit.epoch, "index": index,
                "data": snapshot[index * PART_BYTES:(index + 1) * PART_BYTES]}))
        for seq, size in commit.dropped.items():
            for part in range(_parts(size)):
                put(f"delta/{seq}/{part}", None)
        base = {"base_length": len(snapshot), "base_chunks": _parts(len(snapshot)),
                "base_digest": snapshot_digest(snapshot)}
    else:
        if not base:
            raise ValueError("a delta on the state topic needs its base there first")
        assert commit.delta is not None
        parts = _parts(len(commit.delta))
        for part in range(parts):
            put(f"delta/{commit.seq}/{part}", pack({
                "epoch": commit.epoch, "seq": commit.seq, "part": part, "parts": parts,
                "data": commit.delta[part * PART_BYTES:(part + 1) * PART_BYTES]}))
    for user, value in ([] if users is None or not len(users) else encode_users(users)):
        put(f"user/{user.hex()}", value)
    put("manifest", pack({"format": CHANGELOG_FORMAT, "epoch": commit.epoch, "seq": commit.seq,
                          **base, "digest": commit.digest, **meta}))
    return out, base


def restore_from(records: Iterable[tuple[bytes | None, bytes | None]], run_id: str,
                 partition: int) -> Restored | None:
    """The newest committed state of ``partition`` in ``records`` (key, value) of the state
    topic, in offset order; None when it holds none; StateCorruptError when it is damaged."""
    prefix = _prefix(run_id, partition).encode()
    newest: dict[bytes, bytes | None] = {}
    read = 0
    for key, value in records:
        read += 1
        if key is not None and key.startswith(prefix):
            newest[key[len(prefix):]] = value
    raw = newest.get(b"manifest")
    if raw is None:
        return None
    manifest = msgpack.unpackb(raw, raw=False)
    if manifest.get("format") != CHANGELOG_FORMAT:
        raise StateCorruptError(f"the state topic's manifest is not of format {CHANGELOG_FORMAT}")
    epoch, seq = manifest["epoch"], manifest["seq"]
    parts = []
    for index in range(manifest["base_chunks"]):
        chunk = _unpack(newest.get(f"base/{index}".encode()))
        if chunk is None or chunk["epoch"] != epoch or chunk["index"] != index:
            raise StateCorruptError(f"the state topic lacks base part {index} of epoch {epoch}")
        parts.append(chunk["data"])
    base = b"".join(parts)
    if len(base) != manifest["base_length"] or not hmac.compare_digest(
            snapshot_digest(base), bytes(manifest["base_digest"])):
        raise StateCorruptError("the state topic's base snapshot fails its digest")
    deltas = [_delta(newest, epoch, number) for number in range(1, seq + 1)]
    snapshot = rebuild(base, deltas, bytes(manifest["digest"]))
    users = sorted((bytes.fromhex(k[5:].decode()), v) for k, v in newest.items()
                   if k.startswith(b"user/") and v is not None)
    counts = None if not users else decode_users(
        hashes_of([k for k, _ in users]), list(range(len(users))), [v for _, v in users])
    if counts is not None and all(len(v) == COUNT.itemsize for _, v in users):
        counts = UserCounts(counts.keys, counts.counts)  # no per-step cap: stored as written
    return Restored(
        snapshot=snapshot, watermark=int(manifest["watermark"]), t=int(manifest["t"]),
        sequence=int(manifest["sequence"]), config=dict(manifest.get("config") or {}),
        last_tick_ms=int(manifest.get("last_tick_ms", -1)),
        latest_records=int(manifest.get("latest_records", 0)), epoch=int(epoch), seq=int(seq),
        sizes=tuple(int(n) for n in manifest.get("sizes", ())), users=counts,
        records_read=read)


def _unpack(value: bytes | None) -> dict[str, Any] | None:
    return None if value is None else msgpack.unpackb(value, raw=False)


def _delta(newest: dict[bytes, bytes | None], epoch: int, number: int) -> bytes:
    first = _unpack(newest.get(f"delta/{number}/0".encode()))
    if first is None or first["epoch"] != epoch or first["seq"] != number:
        raise StateCorruptError(f"the state topic lacks delta {number} of epoch {epoch}")
    data = [first["data"]]
    for part in range(1, first["parts"]):
        more = _unpack(newest.get(f"delta/{number}/{part}".encode()))
        if more is None or more["epoch"] != epoch or more["seq"] != number:
            raise StateCorruptError(f"the state topic lacks part {part} of delta {number}")
        data.append(more["data"])
    return b"".join(data)


def make_restore(bootstrap: str, topic: str, run_id: str, *, timeout_s: float = 60.0
                 ) -> Callable[[int], Restored | None]:
    """``restore(partition)``: the partition's state read back from ``topic`` (group-less,
    ``read_committed``, the whole state partition up to its end)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    def restore(partition: int) -> Restored | None:
        consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": f"dpsynth-state-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "isolation.level": "read_committed",
            "enable.partition.eof": True, "auto.offset.reset": "earliest",
            "fetch.max.bytes": 64 * 2**20, "log_level": 4,
            "fetch.wait.max.ms": 10,  # at the end, answer at once (EOF), not after 500 ms
        })
        started = time.monotonic()
        try:
            count = len(consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions)
            tp = TopicPartition(topic, output_partition(partition, count))
            low, high = watermarks(consumer, tp, timeout_s)  # a leader election: ask again
            if high <= low:
                return None
            consumer.assign([TopicPartition(topic, tp.partition, low)])
            records: list[tuple[bytes | None, bytes | None]] = []
            deadline = time.monotonic() + timeout_s
            while True:
                batch = consumer.consume(10_000, timeout=0.5)
                if not batch and time.monotonic() > deadline:
                    raise StateCorruptError(f"the state topic {topic} was not read to its end "
                                            f"in {timeout_s:g} s (an open transaction?)")
                done = False
                for m in batch:
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            done = True
                            continue
                        raise KafkaException(err)
                    records.append((m.key(), m.value()))
                if done:
                    break
            restored = restore_from(records, run_id, partition)
            log.info("partition %d: state topic %s read (%d records, %.1f s)%s", partition,
                     topic, len(records), time.monotonic() - started,
                     "" if restored is None else f": watermark {restored.watermark}")
            return restored
        finally:
            consumer.close()

    return restore
