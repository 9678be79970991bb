"""One input partition's output: releases, their latest view and dead letters, one transaction each.

Layer: adapter, free of Kafka (the :class:`TransactionalSink` protocol is met by
:class:`~dpsynth.stream.sink.TransactionalSink` and by the test kit's in-memory broker).
:class:`Output` holds what the partition's processor produced and has not published yet, and
:meth:`Output.publish` puts it on the broker in **one Kafka transaction** together with the
input offset it covers: every record of every pending release on the synthetic (history)
topic, the newest release again on the latest view, the dead letters, and the input consumer
group's offset. A ``read_committed`` reader sees all of it or none of it, and the group offset
moves with it (docs/design.md D12). An aborted transaction (a broker
failure, a coordinator that timed it out) is retried whole, with the same bytes.

**Placement** (issue 46): every record of input partition p — on the history, the points and
the latest view — goes to partition ``p mod`` (that topic's partition count)
(:func:`~dpsynth.stream.codecs.output_partition`), never by its key's hash: the releases of one
input partition, produced in sequence order by its one transactional producer, then sit on one
partition of each topic in sequence order, so any consumer receives them in that order.

**The latest view** (docs/design.md D17, ``docs/operator.md`` "The latest view") is a compacted
topic that keeps, per (run, input partition), the records of its newest release: each record has its
own key ``run_id/partition/latest/<position>`` (position 0 the header, the end record last), so
compaction keeps one whole release and no older record of it; when a release has fewer records
than the one before, the positions beyond it are deleted with tombstones in the same
transaction. Records go to latest-view partition ``partition mod`` (its partition count), in
order. It is written at most every ``latest_interval_s`` (the newest release then), so a late
subscriber reads about one release per partition whatever the history length.

**Replay** (:meth:`Output.discard`): what a partition recomputes below the input offset its
group committed was published by a committed transaction already; it is dropped, not published
twice. The record counts of dropped releases are kept, so the latest view's tombstones still
cover every position an earlier transaction wrote.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from dpsynth.stream.codecs import output_partition
from dpsynth.stream.crash import CrashPoints
from dpsynth.stream.metrics import Metrics
from dpsynth.stream.sink import DeliveryError, TransactionAborted

log = logging.getLogger(__name__)

#: How long a publish keeps retrying aborted transactions with its producer; then
#: :class:`~dpsynth.stream.sink.DeliveryError`, and the input loop joins again with new ones.
RETRY_FOR_S = 30.0
#: A record as sent: (topic, key, value — None: a tombstone —, partition — None: by key).
Record = tuple[str, bytes, bytes | None, int | None]


class TransactionalSink(Protocol):
    """Where one partition's transactions go (:class:`~dpsynth.stream.sink.TransactionalSink`)."""

    def begin(self) -> None:
        """Begin a transaction."""

    def send(self, topic: str, key: bytes, value: bytes | None,
             partition: int | None = None) -> None:
        """Queue one record of the open transaction (``value`` None: a tombstone)."""

    def flush(self) -> None:
        """Wait until the broker has every record sent so far (not yet committed)."""

    def commit(self, offset: int | None) -> None:
        """Commit the transaction with the input offset ``offset`` (None: no offset);
        :class:`~dpsynth.stream.sink.TransactionAborted` when the broker aborted it."""

    def abort(self) -> None:
        """Abort the open transaction."""


def latest_key(run_id: str, partition: int, position: int) -> bytes:
    """Key of the record at ``position`` of a partition's release in the latest view.

    >>> latest_key("run-a", 3, 0)
    b'run-a/3/latest/0'
    """
    return f"{run_id}/{partition}/latest/{position}".encode()


@dataclass
class Topics:
    """Where a partition's output goes (``*_partitions``: the topics' partition counts)."""

    output: str
    dead_letter: str
    latest: str | None = None  # None: no latest view
    latest_partitions: int = 1
    points: str | None = None  # the materialised points (DPSYNTH_POINTS_FORMAT), or None
    output_partitions: int = 1
    points_partitions: int = 1


@dataclass
class _Pending:
    #: (release, arrival of its last record, completion)
    releases: list[tuple[Any, float, float]] = field(default_factory=list)
    dead_letters: list[tuple[bytes, bytes]] = field(default_factory=list)


class Output:
    """The pending output of one input partition and its transactions (module docstring).

    ``encode(release)`` returns ``(sequence, records)`` of a release in its wire format;
    ``history_key(sequence)`` the history topic's key of its records; ``points(release)`` its
    materialised points' records (:mod:`dpsynth.stream.points`), produced right after its
    records with the same key, in the same transaction.
    """

    def __init__(self, *, run_id: str, partition: int, topics: Topics, sink: TransactionalSink,
                 encode: Callable[[Any], tuple[int, list[bytes]]],
                 history_key: Callable[[int], bytes], linger_s: float, latest_interval_s: float,
                 latest_records: int = 0, metrics: Metrics | None = None,
                 crash: CrashPoints | None = None,
                 points: Callable[[Any], list[bytes]] | None = None) -> None:
        self.run_id, self.partition, self.topics, self.sink = run_id, partition, topics, sink
        self.encode, self.history_key = encode, history_key
        self.points = points
        self.linger_s, self.latest_interval_s = linger_s, latest_interval_s
        self.metrics = metrics or Metrics()
        self.crash = crash or CrashPoints(None)
        #: records of the release the latest view holds (its positions beyond a shorter
        #: release need tombstones); bound to the state (the manifest), raised by replays
        self.latest_records = int(latest_records)
        self._pending = _Pending()
        self._sent = _Pending()  # produced into the open transaction, not committed
        self._sent_records = self._sent_points = 0
        self._open_at: float | None = None
        self._latest: list[bytes] | None = None  # newest release not yet in the latest view
        self._latest_at = float("-inf")  # when the latest view was last written

    # -- what waits -----------------------------------------------------------------------------

    def add_release(self, release: Any, arrived: float, done: float) -> None:
        """A completed release (``arrived``: its last record's arrival; ``done``: completion)."""
        self._pending.releases.append((release, arrived, done))

    def add_dead_letter(self, key: bytes, value: bytes) -> None:
        """A dead letter, published with the next transaction."""
        self._pending.dead_letters.append((key, value))

    @property
    def pending(self) -> bool:
        """Releases or dead letters wait to be published."""
        return bool(self._pending.releases or self._pending.dead_letters)

    @property
    def releases_waiting(self) -> bool:
        """Completed releases wait to be published."""
        return bool(self._pending.releases)

    def releases_due(self, now: float | None = None) -> bool:
        """True when a completed release has waited ``linger_s`` to be published."""
        if not self._pending.releases:
            return False
        now = time.monotonic() if now is None else now
        return now - self._pending.releases[0][2] >= self.linger_s

    def latest_due(self, now: float | None = None) -> bool:
        """True when a release waits for the latest view and ``latest_interval_s`` passed."""
        if self._latest is None:
            return False
        now = time.monotonic() if now is None else now
        return now - self._latest_at >= self.latest_interval_s

    # -- replay: computed again, published already ---------------------------------------------

    def discard(self) -> None:
        """Drop the pending output: a committed transaction published it already (a replay
        below the group's offset). The newest dropped release is kept for the latest view (it
        may not have reached it), the record counts of all for its tombstones."""
        assert self._open_at is None, "a replay never runs inside a transaction"
        for release, _, _ in self._pending.releases:
            _, records = self.encode(release)
            self.latest_records = max(self.latest_records, len(records))
            self._latest = records if self.topics.latest else None
        self.metrics.inc("releases_replayed", self.partition, len(self._pending.releases))
        self._pending = _Pending()

    # -- publishing ----------------------------------------------------------------------------

    @property
    def open_since(self) -> float | None:
        """When the open transaction began (None: none is open)."""
        return self._open_at

    def send(self) -> None:
        """Produce the pending releases (and their points) and dead letters into the open
        transaction — begun now when none is — without waiting: the broker takes them while
        the caller computes the next releases; :meth:`publish` commits them."""
        if not self.pending:
            return
        if self._open_at is None:
            self.sink.begin()
            self._open_at = time.monotonic()
        topics, pending = self.topics, self._pending
        self._pending = _Pending()
        records: list[Record] = []
        first = 0
        on_history = output_partition(self.partition, topics.output_partitions)
        on_points = output_partition(self.partition, topics.points_partitions)
        for release, _, _ in pending.releases:
            sequence, release_records = self.encode(release)
            key = self.history_key(sequence)
            first = first or len(release_records)
            records += [(topics.output, key, r, on_history) for r in release_records]
            self._sent_records += len(release_records)
            if topics.latest:
                self._latest = release_records
            if topics.points is not None and self.points is not None:
                point_records = self.points(release)  # DPSYNTH_POINTS_FORMAT
                records += [(topics.points, key, r, on_points) for r in point_records]
                self._sent_points += len(point_records)
        records += [(topics.dead_letter, k, v, None) for k, v in pending.dead_letters]
        start = 0
        if first and self.crash.armed("mid_release"):
            for record in records[:first // 2 or 1]:
                self.sink.send(*record)
            self.sink.flush()  # half a release on the broker, in an open transaction
            self.crash.reached("mid_release")
            start = first // 2 or 1
        for record in records[start:]:
            self.sink.send(*record)
        self._sent.releases += pending.releases
        self._sent.dead_letters += pending.dead_letters

    def publish(self, offset: int | None, *, latest: bool = False,
                extra: list[Record] | None = None) -> bool:
        """Commit one transaction: what :meth:`send` put in it, every pending record, the
        latest view when due (or ``latest``), ``extra`` records (the state topic's) and the
        input ``offset`` (the next offset to read; None: none). Returns False when there was
        nothing to do. An aborted transaction is sent again whole (the same bytes: releases
        are encoded again), for up to :data:`RETRY_FOR_S`."""
        p = self.partition
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            self.send()
            write_latest = self._latest is not None and (latest or self.latest_due())
            if self._open_at is None and not (write_latest or extra or offset is not None):
                return False
            try:
                if self._open_at is None:
                    self.sink.begin()
                    self._open_at = time.monotonic()
                for record in (self._latest_records() if write_latest else []) + (extra or []):
                    self.sink.send(*record)
                if self.crash.armed("after_release_produced"):
                    self.sink.flush()
                self.crash.reached("after_release_produced")
                self.sink.commit(offset)
                break
            except TransactionAborted as e:
                self.metrics.inc("transactions_aborted", p)
                self._open_at = None
                # what the aborted transaction held is pending again, in order
                self._pending = _Pending(self._sent.releases + self._pending.releases,
                                         self._sent.dead_letters + self._pending.dead_letters)
                self._sent, self._sent_records, self._sent_points = _Pending(), 0, 0
                if time.monotonic() > deadline:
                    raise DeliveryError(
                        f"partition {p}: transactions kept aborting for {RETRY_FOR_S:g} s "
                        f"(last: {e}); check the brokers") from None
                log.warning("partition %d: %s; publishing it again", p, e)
        delivered = time.monotonic()
        self._open_at = None
        for _, arrived, _ in self._sent.releases:
            self.metrics.observe("release_latency_seconds", p, max(delivered - arrived, 0.0))
        self.metrics.inc("releases", p, len(self._sent.releases))
        self.metrics.inc("release_records", p, self._sent_records)
        if self._sent_points:
            self.metrics.inc("points_records", p, self._sent_points)
        if write_latest:
            assert self._latest is not None
            self.latest_records = len(self._latest)
            self._latest, self._latest_at = None, delivered
            self.metrics.inc("latest_view_writes", p)
        self._sent, self._sent_records, self._sent_points = _Pending(), 0, 0
        self.metrics.inc("transactions", p)
        self.crash.reached("after_transaction_commit")
        return True

    def _latest_records(self) -> list[Record]:
        """The newest release under its latest-view keys, and tombstones past its end."""
        assert self._latest is not None and self.topics.latest is not None
        where = output_partition(self.partition, self.topics.latest_partitions)
        out: list[Record] = [
            (self.topics.latest, latest_key(self.run_id, self.partition, i), r, where)
            for i, r in enumerate(self._latest)]
        out += [(self.topics.latest, latest_key(self.run_id, self.partition, i), None, where)
                for i in range(len(self._latest), self.latest_records)]
        return out
