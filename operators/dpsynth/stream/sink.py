"""The worker's producers: one transactional producer per input partition, and the tick markers'.

Layer: adapter (confluent-kafka). Releases, their latest view and dead letters leave through
:class:`TransactionalSink`, one librdkafka producer per owned input partition whose
``transactional.id`` is derived from the run, the input topic and the partition
(:func:`transactional_id`). Each :meth:`~dpsynth.stream.output.Output.publish` is one Kafka
transaction: every record it holds *and* the input offset it covers
(``send_offsets_to_transaction``, in the input consumer group) commit together or not at all
(docs/design.md D12). A worker that takes a partition over (a restart,
a rebalance, a new pod) initialises a producer with the same id first, which fences the previous
owner's producer (a zombie can no longer write) and aborts its open transaction at once.

``transaction.timeout.ms`` (``DPSYNTH_TRANSACTION_TIMEOUT_S``, 5 s) bounds how long a dead
producer's open transaction holds ``read_committed`` readers of the partitions it wrote when
nobody takes the partition over: the coordinator aborts it after the timeout, at its next scan
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``, 10 s by default; 1 s on the
test broker). librdkafka requires ``socket.timeout.ms`` and ``message.timeout.ms`` not above it.

Tick markers go into the input topic through :class:`KafkaSink`, librdkafka's idempotent
producer outside any transaction: a marker must become visible even when a release transaction
aborts, and a repeated marker is harmless (the processor skips a period applied already).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from dpsynth.errors import DpsynthError

log = logging.getLogger(__name__)

#: librdkafka settings both producers share (releases are whole datasets: large batches, lz4).
_COMMON: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "message.max.bytes": 1_000_000,
    "queue.buffering.max.kbytes": 262_144,
    # A release is a whole dataset (≈ 1 MB at t = 10⁶, mostly small int64 counts): lz4
    # batches cut the bytes the broker writes and acknowledges (docs/decisions/0016).
    # Transparent to every consumer: the release records' bytes are unchanged (checksums,
    # golden hashes).
    "compression.type": "lz4",
    "log_level": 4,  # librdkafka warnings and errors only
}


#: How long past its own timeout a transactional call may take before the producer is given up.
CALL_MARGIN_S = 5.0


class DeliveryError(DpsynthError):
    """Records could not be delivered, or a transaction could not be committed, in time."""


class TransactionAborted(DpsynthError):
    """The broker aborted the open transaction (an abortable error): nothing of it is visible
    to ``read_committed`` readers and its input offset is not committed; retry it whole."""


class MembershipLost(DpsynthError):
    """The input consumer group refused the transaction's offsets: this worker's consumer lost
    its generation (fenced by another static member, or a rebalance). The transaction is
    aborted; the input loop must join the group again (its positions are stale) before
    anything of the partition is published. ``error``: the broker's."""

    def __init__(self, message: str, error: KafkaError) -> None:
        super().__init__(message)
        self.error = error


#: Offset-commit errors that say the consumer's membership is stale (KIP-447 fencing).
_MEMBERSHIP = frozenset((KafkaError.ILLEGAL_GENERATION, KafkaError.FENCED_INSTANCE_ID,
                         KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS))


def transactional_id(run_id: str, input_topic: str, partition: int) -> str:
    """The ``transactional.id`` of an input partition's release producer: one per (run, input
    partition), whichever worker owns it, so that a new owner fences the previous one.

    >>> transactional_id("run-a", "raw", 3)
    'dpsynth/run-a/raw/3'
    """
    return f"dpsynth/{run_id}/{input_topic}/{partition}"


def bounded_call(call: Callable[[], Any], timeout_s: float, what: str) -> None:
    """Run a blocking client call on a helper thread; wait at most ``timeout_s``.

    librdkafka's ``send_offsets_to_transaction`` can ignore its own timeout while the group
    coordinator is down (confluentinc/librdkafka#5456, #5511), which stalled a partition until
    the poll interval expired. An overrun raises :class:`DeliveryError`: the input loop joins
    again with a new producer of the same id, whose initialisation fences the stuck one (its
    call then fails and its thread ends). The call's own exception is raised here.
    """
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            outcome.append(e)

    thread = threading.Thread(target=run, name=what, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not outcome:
        raise DeliveryError(f"{what} did not return in {timeout_s:.0f} s (a coordinator that "
                            "does not answer); the producer is given up")
    if outcome[0] is not None:
        raise outcome[0]


def _produce(producer: Producer, on_delivery: Callable[[KafkaError | None, Any], None],
             topic: str, key: bytes, value: bytes | None, partition: int | None) -> None:
    """Queue one record (to ``partition``, or by key), waiting while librdkafka's queue is
    full; then serve delivery callbacks already due."""
    where: dict[str, Any] = {} if partition is None else {"partition": partition}
    while True:
        try:
            producer.produce(topic, value=value, key=key, on_delivery=on_delivery, **where)
            break
        except BufferError:
            producer.poll(0.05)
    producer.poll(0)


def kafka_error(e: KafkaException) -> KafkaError | None:
    """The :class:`KafkaError` a :class:`KafkaException` carries, or None."""
    return e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None


#: Errors of a partition whose leader is being elected (librdkafka does not flag them
#: retriable on a metadata call): asked again until the timeout.
_ELECTION = frozenset({KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.LEADER_NOT_AVAILABLE,
                       KafkaError.NOT_LEADER_FOR_PARTITION})


def watermarks(consumer: Consumer, tp: TopicPartition, timeout_s: float) -> tuple[int, int]:
    """(low, high) watermarks of ``tp``, asked again while the broker's error is retriable — a
    leader election in progress answers OFFSET_NOT_AVAILABLE ("high watermark is not caught
    up") for a moment, which is no reason to stop the worker — until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=max(deadline - time.monotonic(),
                                                                  1.0))
        except KafkaException as e:
            err = kafka_error(e)
            if err is None or not (err.retriable() or err.code() in _ELECTION) or (
                    time.monotonic() > deadline):
                raise
            log.warning("input %s[%d]: %s; asking again", tp.topic, tp.partition, err.str())
            time.sleep(0.2)


class TransactionalSink:
    """One input partition's transactional producer (see the module docstring).

    ``group_metadata`` returns the input consumer's group metadata
    (``Consumer.consumer_group_metadata()``) for ``send_offsets_to_transaction``: the broker
    refuses the offsets of a consumer that lost its generation, so a zombie worker can commit
    neither records nor offsets.
    """

    def __init__(self, bootstrap_servers: str, transactional_id: str, *, input_topic: str,
                 partition: int, group_metadata: Callable[[], Any] | None,
                 timeout_s: float = 5.0, call_timeout_s: float = 15.0,
                 client_id: str = "dpsynth-worker") -> None:
        self.transactional_id = transactional_id
        self.input_topic = input_topic
        self.partition = int(partition)
        self.group_metadata = group_metadata
        self.call_timeout_s = call_timeout_s
        self._errors: list[str] = []
        timeout_ms = int(timeout_s * 1000)
        self._producer = Producer({
            **_COMMON,
            "bootstrap.servers": bootstrap_servers,
            "client.id": client_id,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": timeout_ms,
            "socket.timeout.ms": min(timeout_ms, 60_000),
            "message.timeout.ms": timeout_ms,
        })
        self._open = False
        self._wedged = False
        self._init()

    def _init(self) -> None:
        """``init_transactions``: fences every earlier producer of this id and completes (or
        aborts) its open transaction; retried while the coordinator is not ready."""
        deadline = time.monotonic() + self.call_timeout_s
        while True:
            try:
                self._producer.init_transactions(max(deadline - time.monotonic(), 1.0))
                return
            except KafkaException as e:
                err = kafka_error(e)
                if err is None or not err.retriable():
                    raise
                if time.monotonic() > deadline:  # the input loop joins again, later
                    raise DeliveryError(f"transactions of {self.transactional_id} could not "
                                        f"be initialised ({err.str()})") from None
                log.warning("transactions of %s not initialised yet (%s); retrying",
                            self.transactional_id, err.str())

    def _on_delivery(self, err: KafkaError | None, msg: object) -> None:
        if err is not None:
            self._errors.append(str(err))  # librdkafka's text: codes and topic, no payload

    def begin(self) -> None:
        """Begin a transaction (records sent from now on belong to it)."""
        self._errors = []
        self._producer.begin_transaction()
        self._open = True

    def send(self, topic: str, key: bytes, value: bytes | None,
             partition: int | None = None) -> None:
        """Queue one record of the open transaction (``value`` None: a tombstone)."""
        _produce(self._producer, self._on_delivery, topic, key, value, partition)

    def flush(self) -> None:
        """Wait until the broker has every record sent so far (still uncommitted)."""
        remaining = self._producer.flush(self.call_timeout_s)
        if remaining or self._errors:
            self._abort_after(f"{remaining} records undelivered, delivery failures "
                              f"{self._errors[:3]}")

    def commit(self, offset: int | None) -> None:
        """Commit the open transaction with the input ``offset`` (the next one to read; None:
        records only). Raises :class:`TransactionAborted` when the broker aborted it (retry it
        whole), ``KafkaException`` on a fatal error (this producer was fenced: the partition
        belongs to another worker now)."""
        try:
            self.flush()  # a record that failed aborts the transaction (epoch bump) at once
            if offset is not None:
                metadata = self.group_metadata() if self.group_metadata is not None else None
                if metadata is None:
                    raise DeliveryError("no input consumer group to commit offsets to")
                self._retry(lambda timeout: self._bounded(
                    "send_offsets_to_transaction", timeout,
                    lambda: self._producer.send_offsets_to_transaction(
                        [TopicPartition(self.input_topic, self.partition, offset)], metadata,
                        timeout)))
            self._retry(self._producer.commit_transaction)
        except KafkaException as e:
            err = kafka_error(e)
            if err is not None and err.code() in _MEMBERSHIP:
                self.abort()
                raise MembershipLost(f"{self.transactional_id}: the group refused the "
                                     f"offsets ({err.str()})", err) from None
            if err is not None and err.txn_requires_abort():
                self._abort_after(err.str())
            if err is None or err.fatal():
                raise  # fenced: the input loop joins again with new producers
            # retried until call_timeout_s in vain (a coordinator that does not answer):
            # this producer is given up, the input loop joins again with new producers
            raise DeliveryError(f"{self.transactional_id}: the transaction could not be "
                                f"committed ({err.str()})") from None
        self._open = False

    def _retry(self, call: Callable[[float], Any]) -> None:
        """Call a transactional API, again while librdkafka says the error is retriable."""
        deadline = time.monotonic() + self.call_timeout_s
        while True:
            try:
                call(max(deadline - time.monotonic(), 1.0))
                return
            except KafkaException as e:
                err = kafka_error(e)
                if err is None or not err.retriable() or err.txn_requires_abort() or (
                        time.monotonic() > deadline):
                    raise
                log.warning("%s: %s; retrying", self.transactional_id, err.str())

    def _bounded(self, name: str, timeout: float, call: Callable[[], Any]) -> None:
        """``call`` by :func:`bounded_call`; one that overruns leaves this producer wedged
        (the input loop gives it up: :meth:`close` leaves it to the fencing)."""
        try:
            bounded_call(call, timeout + CALL_MARGIN_S, f"{self.transactional_id}: {name}")
        except DeliveryError:
            self._wedged = True
            raise

    def _abort_after(self, why: str) -> None:
        self.abort()
        raise TransactionAborted(f"transaction of {self.transactional_id} aborted ({why})")

    def abort(self) -> None:
        """Abort the open transaction (no-op when none is open)."""
        if self._open:
            self._open = False
            self._retry(self._producer.abort_transaction)

    def close(self) -> None:
        """Abort an open transaction (best effort) and drop the producer; never raises (a
        fenced or failed producer cannot abort: its successor's initialisation does)."""
        if self._wedged:  # a call still blocks inside librdkafka: leave it to the fencing
            log.info("%s closed without abort (a call did not return)", self.transactional_id)
            return
        try:
            self.abort()
            self._producer.flush(1.0)
        except KafkaException as e:
            log.info("%s closed without abort (%s)", self.transactional_id, e)


class KafkaSink:
    """Idempotent producer outside transactions: the tick markers (see the module docstring)."""

    def __init__(self, bootstrap_servers: str, *, client_id: str = "dpsynth-worker",
                 flush_timeout_s: float = 60.0) -> None:
        self.flush_timeout_s = flush_timeout_s
        self._errors: list[str] = []
        self._producer = Producer({
            **_COMMON,
            "bootstrap.servers": bootstrap_servers,
            "client.id": client_id,
            "enable.idempotence": True,  # implies acks=all, ordered retries without duplicates
        })

    def _on_delivery(self, err: KafkaError | None, msg: object) -> None:
        if err is not None:
            self._errors.append(str(err))

    def send(self, topic: str, key: bytes, value: bytes | None,
             partition: int | None = None) -> None:
        """Queue one record (to ``partition``, or by key); waits while the queue is full."""
        _produce(self._producer, self._on_delivery, topic, key, value, partition)

    def flush(self) -> None:
        """Wait until every queued record is acknowledged by the broker, or raise."""
        remaining = self._producer.flush(self.flush_timeout_s)
        if remaining or self._errors:
            errors, self._errors = self._errors[:3], []
            raise DeliveryError(
                f"{remaining} records still queued after {self.flush_timeout_s:g} s and "
                f"{len(errors)} delivery failures (first: {errors}); check the broker and that "
                "the input topic (DPSYNTH_INPUT_TOPIC) exists and accepts the worker's writes"
            )

    def close(self) -> None:
        """Deliver what is queued (best effort) and drop the producer."""
        self._producer.flush(5.0)
