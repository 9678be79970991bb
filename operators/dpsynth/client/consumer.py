"""The consumer library: checked, de-duplicated releases from the synthetic topic, and their merge.

Layer: adapter (confluent-kafka). :class:`ReleaseConsumer` reads the synthetic topic
``read_committed``, feeds every record to a :class:`~dpsynth.release.points_v1.ReleaseAssembler`
(checksums, order, completeness; duplicates dropped by ``(run_id, partition, sequence)``) and
keeps the latest release of every input partition. It never yields a duplicate (a release
re-produced after a worker crash is byte-identical and is dropped) and never yields a corrupt or
incomplete release (those are counted in :attr:`ReleaseConsumer.rejected` and logged, by
position only).

The synthetic dataset at any time is the union of the partitions' latest releases (docs/design.md
D13: disjoint partitions compose in parallel): :meth:`ReleaseConsumer.merge_latest`.

Ordering: the worker puts every release of input partition p on topic partition p mod (the
topic's partitions), in sequence order (docs/operator.md "The contract"), so releases arrive in
sequence order. On a topic written before issue 46 (placed by the key's hash) two releases of
one input partition may sit on different topic partitions and arrive out of sequence order:
:attr:`latest` always holds the highest sequence seen, and ``releases(newest_only=True)``
yields only releases newer than that.

**The latest view** (``latest_view=True``, or the latest view's topic by name): the compacted
topic that holds each input partition's newest release (``docs/operator.md`` "The latest
view"). Read from its beginning, it costs about one release per partition whatever the history
length; tombstones (positions a shorter release deleted) are skipped, and chunks whose header
compaction already replaced are refused as ``no_header`` (counted in :attr:`rejected`).

Example::

    with ReleaseConsumer("127.0.0.1:9092", "dpsynth-synthetic") as consumer:
        for event in consumer.releases(idle_s=5):
            print(event.key.partition, event.key.sequence, event.release.t)
        points = consumer.merge_latest()       # the merged synthetic dataset, in [0,1]^d
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from dpsynth.release import (
    MAX_DECODE_DEPTH,
    Release,
    ReleaseAssembler,
    ReleaseIncompleteError,
    ReleaseKey,
)
from dpsynth.schema import Schema

log = logging.getLogger(__name__)


#: The latest view's topic name is the synthetic topic's plus this (the worker's default).
LATEST_VIEW_SUFFIX = "-latest"


def latest_view_topic(output_topic: str) -> str:
    """The latest view's default topic of a synthetic topic (``DPSYNTH_LATEST_TOPIC`` unset).

    >>> latest_view_topic("dpsynth-synthetic")
    'dpsynth-synthetic-latest'
    """
    return output_topic + LATEST_VIEW_SUFFIX


class ReleaseEvent(NamedTuple):
    """One complete, checked, first-seen release and where its end record was read."""

    key: ReleaseKey
    release: Release
    topic_partition: int
    offset: int


class ReleaseTracker:
    """The broker-free half of :class:`ReleaseConsumer`: records in, first-seen releases out.

    Keeps the latest release per (run, input partition) and merges them. Feed it records in
    topic-partition order (any interleaving of partitions).

    >>> from dpsynth.release import (encode_release)
    >>> r = Release(t=2, depth=1, leaf_counts=np.array([1, 1]), metadata={"d": 1})
    >>> records = encode_release(r, run_id="run", partition=0, sequence=1)
    >>> tracker = ReleaseTracker()
    >>> [tracker.add(b"run/0/1", v) is not None for v in records + records]
    [False, False, True, False, False, False]
    >>> tracker.latest_t(), tracker.merge_latest().shape
    ({0: 2}, (2, 1))
    """

    def __init__(self, *, run_id: str | None = None, max_depth: int = MAX_DECODE_DEPTH) -> None:
        self.run_id = run_id
        self.assembler = ReleaseAssembler(max_depth=max_depth)
        self.latest: dict[tuple[str, int], tuple[ReleaseKey, Release]] = {}
        self.rejected = 0
        self.records = 0
        self.tombstones = 0

    def add(
        self, key: bytes | None, value: bytes | None, topic_partition: int = 0,
        offset: int = -1
    ) -> ReleaseEvent | None:
        """Take one record of the synthetic topic (or of the latest view: a tombstone, value
        None, is skipped); return the release it completes, if new."""
        self.records += 1
        if value is None:
            self.tombstones += 1
            return None
        if self.run_id is not None and key is not None and not key.startswith(
            self.run_id.encode() + b"/"
        ):
            return None
        try:
            done = self.assembler.add_keyed(value)
        except ReleaseIncompleteError as e:
            self.rejected += 1
            log.warning("release rejected (%s: %s); a complete retry is still accepted",
                        e.reason, e)
            return None
        if done is None:
            return None
        release_key, release = done
        if self.run_id is not None and release_key.run_id != self.run_id:
            return None
        slot = (release_key.run_id, release_key.partition)
        current = self.latest.get(slot)
        if current is None or current[0].sequence < release_key.sequence:
            self.latest[slot] = (release_key, release)
        return ReleaseEvent(release_key, release, topic_partition, offset)

    def merge_latest(
        self, *, run_id: str | None = None, schema: Schema | None = None
    ) -> np.ndarray:
        """The union of every input partition's latest release: the synthetic dataset now.

        Points are in [0,1]^d, or in the original units when ``schema`` is given. With several
        runs on the topic, name one with ``run_id`` (or the tracker's own ``run_id``).
        """
        run_id = run_id or self.run_id
        runs = {r for r, _ in self.latest}
        if run_id is None and len(runs) > 1:
            raise ValueError(f"the topic holds several runs {sorted(runs)}: pass run_id")
        chosen = [rel for (r, _), (_, rel) in sorted(self.latest.items())
                  if run_id is None or r == run_id]
        if not chosen:
            return np.zeros((0, schema.d if schema is not None else 0))
        points = np.vstack([rel.points for rel in chosen])
        return schema.from_unit(points) if schema is not None else points

    def latest_t(self, run_id: str | None = None) -> dict[int, int]:
        """Input partition → t of its latest release."""
        run_id = run_id or self.run_id
        return {p: rel.t for (r, p), (_, rel) in self.latest.items()
                if run_id is None or r == run_id}


class ReleaseConsumer:
    """Reassembled releases of the synthetic topic (see the module docstring).

    Parameters
    ----------
    bootstrap_servers
        ``host:port[,host:port]``.
    topic
        The synthetic topic (``DPSYNTH_OUTPUT_TOPIC``).
    group_id
        Join this consumer group (offsets committed, partitions shared with other members). By
        default no group is used: every partition is assigned to this consumer.
    run_id
        Only releases of this run (``DPSYNTH_RUN_ID``); records of other runs are ignored.
    from_beginning
        Start at the beginning of the topic (default), else at its end (only new releases).
    latest_view
        Read the latest view of ``topic`` (:func:`latest_view_topic`) instead, from its
        beginning: each input partition's newest release.
    config
        Extra librdkafka settings.
    max_depth
        Deepest release accepted (default 32).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        group_id: str | None = None,
        run_id: str | None = None,
        from_beginning: bool = True,
        config: Mapping[str, Any] | None = None,
        max_depth: int = MAX_DECODE_DEPTH,
        latest_view: bool = False,
    ) -> None:
        from confluent_kafka import Consumer, TopicPartition

        if latest_view:
            topic, from_beginning = latest_view_topic(topic), True
        self.topic = topic
        self.tracker = ReleaseTracker(run_id=run_id, max_depth=max_depth)
        settings: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            "group.id": group_id or f"dpsynth-reader-{uuid.uuid4().hex[:12]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": group_id is not None,
            "auto.offset.reset": "earliest" if from_beginning else "latest",
            "enable.partition.eof": False,
        }
        settings.update(config or {})
        self._consumer = Consumer(settings)
        if group_id is not None:
            self._consumer.subscribe([topic])
        else:
            metadata = self._consumer.list_topics(topic, timeout=30)
            info = metadata.topics.get(topic)
            if info is None or info.error is not None:
                self._consumer.close()
                raise ValueError(f"topic {topic!r} does not exist on {bootstrap_servers}")
            start = -2 if from_beginning else -1  # OFFSET_BEGINNING / OFFSET_END
            self._consumer.assign(
                [TopicPartition(topic, p, start) for p in sorted(info.partitions)]
            )

    # -- reading ---------------------------------------------------------------------------

    def poll(self, timeout_s: float = 1.0, max_records: int = 10_000) -> list[ReleaseEvent]:
        """Read what arrives within ``timeout_s``; return the releases it completed."""
        out = []
        for message in self._consumer.consume(max_records, timeout=timeout_s):
            if message.error() is not None:
                log.warning("synthetic topic read error: %s", message.error())
                continue
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None  # set where there is no error
            event = self.tracker.add(message.key(), message.value(), partition, offset)
            if event is not None:
                out.append(event)
        return out

    def releases(
        self,
        *,
        timeout_s: float | None = None,
        idle_s: float | None = None,
        newest_only: bool = False,
    ) -> Iterator[ReleaseEvent]:
        """Yield new releases as they complete, each once.

        Stops after ``timeout_s`` in total, or after ``idle_s`` without any record; runs
        forever when both are None. ``newest_only`` skips a release older than the latest one
        already seen for its input partition (possible with a multi-partition topic).
        """
        start = last = time.monotonic()
        while True:
            now = time.monotonic()
            if timeout_s is not None and now - start >= timeout_s:
                return
            if idle_s is not None and now - last >= idle_s:
                return
            before = self.tracker.records
            seen = {slot: key.sequence for slot, (key, _) in self.latest.items()}
            for event in self.poll(0.5):
                slot = (event.key.run_id, event.key.partition)
                if newest_only and event.key.sequence < seen.get(slot, -1):
                    continue
                seen[slot] = max(seen.get(slot, -1), event.key.sequence)
                yield event
            if self.tracker.records != before:
                last = time.monotonic()

    def read_to_end(self, timeout_s: float = 60.0) -> list[ReleaseEvent]:
        """Read every partition up to its end as it is now; return the releases completed.

        The end is each assigned partition's high watermark at the call, so a quiet topic is
        read completely without waiting for silence. Raises TimeoutError, naming the
        partitions not reached, after ``timeout_s`` (a transaction left open holds
        ``read_committed`` readers before its records).
        """
        from confluent_kafka import TopicPartition

        deadline = time.monotonic() + timeout_s
        while not (assigned := self._consumer.assignment()):  # a group assigns on poll
            if time.monotonic() > deadline:
                raise TimeoutError(f"no partition of {self.topic!r} assigned in {timeout_s} s")
            self.poll(0.2)
        ends = {tp.partition: self._consumer.get_watermark_offsets(tp, timeout=timeout_s)[1]
                for tp in assigned}
        out: list[ReleaseEvent] = []
        while True:
            positions = {tp.partition: tp.offset for tp in self._consumer.position(
                [TopicPartition(self.topic, p) for p in ends])}
            behind = sorted(p for p, end in ends.items() if end > 0 and positions[p] < end)
            if not behind:
                return out
            if time.monotonic() > deadline:
                raise TimeoutError(f"partitions {behind} of {self.topic!r} not read to their "
                                   f"end within {timeout_s} s")
            out += self.poll(0.2)

    # -- the tracker's view ------------------------------------------------------------------

    @property
    def latest(self) -> dict[tuple[str, int], tuple[ReleaseKey, Release]]:
        """(run_id, input partition) → (key, release) of the highest sequence seen."""
        return self.tracker.latest

    @property
    def rejected(self) -> int:
        """Incomplete or corrupt releases rejected so far."""
        return self.tracker.rejected

    def merge_latest(
        self, *, run_id: str | None = None, schema: Schema | None = None
    ) -> np.ndarray:
        """See :meth:`ReleaseTracker.merge_latest`: the synthetic dataset now."""
        return self.tracker.merge_latest(run_id=run_id, schema=schema)

    def latest_t(self, run_id: str | None = None) -> dict[int, int]:
        """Input partition → t of its latest release."""
        return self.tracker.latest_t(run_id)

    def close(self) -> None:
        """Leave the group (if any) and close the connection."""
        self._consumer.close()

    def __enter__(self) -> ReleaseConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
