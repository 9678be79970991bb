"""The worker's input: a confluent-kafka consumer in one thread that owns the partitions' state.

Layer: adapter (confluent-kafka). Why not Faust's agent: Faust wraps every message in an event
with its own acknowledgement bookkeeping, which caps one-record messages at the rate of a no-op
agent (docs/benchmarks.md, "Kafka worker"), and its aiokafka consumer reads
``read_uncommitted`` outside Faust's exactly-once mode. This loop reads batches of messages with
librdkafka (``consume(n, timeout)``), groups them by partition and hands them to the
:class:`~dpsynth.stream.partitions.Operator`; the Faust app keeps the web server and the life cycle.

Settings that matter, and why (``docs/operator.md`` has the long form):

- ``isolation.level=read_committed``: a record of an aborted (or still open) transaction is
  never counted; the replay reader reads the same way (:mod:`dpsynth.stream.replay`);
- ``enable.auto.commit=false``: the input offset of a partition is committed only inside its
  release transactions (``send_offsets_to_transaction`` with this consumer's group metadata,
  :mod:`dpsynth.stream.output`), with the output it covers (docs/design.md D12,
  exactly-once as consumers see it); this loop never commits an offset itself;
- static membership (``group.instance.id``, :meth:`WorkerConfig.instance_id`): a restarted
  worker takes its partitions back without a rebalance; rebalance callbacks run in this thread,
  between batches, so a revoked partition's output is published and its state committed and
  closed before its new owner reads it (a lost partition is closed without: its session
  expired, its new owner's producer has fenced ours);
- heart-beats run in librdkafka's own thread: a long batch never costs the group membership
  (``max.poll.interval.ms`` bounds one batch);
- a fatal consumer error (librdkafka's ``_FATAL``, e.g. a static member fenced after its session
  expired while the group coordinator moved to another broker) leaves the consumer unusable: the
  loop closes the partitions' states, closes the consumer and joins again with a new one, which
  takes the partitions back as the same static member. More than :data:`REJOINS_PER_WINDOW`
  such errors within :data:`REJOIN_WINDOW_S` end the worker (another live worker with the same
  ``group.instance.id`` would otherwise fence it back and forth).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from dpsynth.errors import ConfigError
from dpsynth.stream.partitions import Operator
from dpsynth.stream.phases import phase
from dpsynth.stream.processor import InputMessage
from dpsynth.stream.settings import WorkerConfig
from dpsynth.stream.sink import DeliveryError, MembershipLost, kafka_error

log = logging.getLogger(__name__)

#: Exit status after a fatal processing error (the state on disk is consistent: restart).
EXIT_FATAL = 3
#: Seconds between "still waiting for partitions" log lines.
WAIT_LOG_S = 5.0
#: Rejoins after a fatal consumer error allowed within :data:`REJOIN_WINDOW_S` seconds; one
#: more ends the worker (a coordinator that moves twice may fence a member twice; a duplicate
#: ``group.instance.id`` fences it every few seconds).
REJOINS_PER_WINDOW = 3
REJOIN_WINDOW_S = 60.0


def is_fatal(err: KafkaError) -> bool:
    """Whether ``err`` leaves the consumer unusable (``fatal()``, or librdkafka's ``_FATAL``
    event, whose own ``fatal()`` is false)."""
    return bool(err.fatal()) or err.code() == KafkaError._FATAL


def consumer_config(config: WorkerConfig) -> dict[str, Any]:
    """librdkafka settings of the input consumer (see the module docstring)."""
    session_ms = int(config.session_timeout_s * 1000)
    out: dict[str, Any] = {
        "bootstrap.servers": config.bootstrap_servers(),
        "group.id": config.app_id,
        "client.id": f"dpsynth-{config.run_id}",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": session_ms,
        "heartbeat.interval.ms": max(session_ms // 10, 100),
        "max.poll.interval.ms": int(config.max_batch_seconds * 1000),
        "enable.partition.eof": False,
        # an input message may be as large as the topic allows (dead-lettered if too large to
        # be a record batch, never a reason to stop the partition)
        "receive.message.max.bytes": max(config.max_input_message_bytes + 1_000_000, 100_000_000),
        "fetch.max.bytes": config.max_input_message_bytes,
        "queued.max.messages.kbytes": 262_144,
        "log_level": 4,  # librdkafka warnings and errors only
    }
    instance = config.instance_id()
    if instance:
        out["group.instance.id"] = instance
    return out


class FencedTooOften(RuntimeError):
    """Fatal consumer errors too often (:data:`REJOINS_PER_WINDOW`): the worker must stop."""

    def __init__(self, last: str, instance: str) -> None:
        super().__init__(
            f"the input consumer or a producer failed {REJOINS_PER_WINDOW + 1} times within "
            f"{REJOIN_WINDOW_S:g} s (last: {last}); if it "
            f"was fenced, another live worker uses group.instance.id {instance!r}: give each "
            "worker its own DPSYNTH_GROUP_INSTANCE_ID (or POD_NAME), or set it to 'off'")


class InputLoop:
    """Consume, process, commit offsets; in one thread (:meth:`start`, :meth:`stop`)."""

    def __init__(self, config: WorkerConfig, operator: Operator) -> None:
        self.config = config
        self.operator = operator
        self.topic = config.input_topic
        self.thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._waiting_since = time.monotonic()
        self._consumer: Consumer | None = None

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the consumer thread."""
        self.thread = threading.Thread(target=self._main, name="dpsynth-input", daemon=True)
        self.thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Ask the loop to finish its batch, commit offsets and close; wait for it."""
        self._stopping.set()
        if self.thread is not None:
            self.thread.join(timeout_s)

    def _main(self) -> None:
        try:
            self.run()
        except BaseException as e:  # noqa: BLE001 - a dead input thread must end the worker
            # messages of dpsynth errors name the fix and never a value or the key
            log.critical("fatal: %s: %s; exiting with status %d (state on disk is consistent: "
                         "fix the cause and restart)", type(e).__name__, e, EXIT_FATAL)
            logging.shutdown()
            os._exit(EXIT_FATAL)

    def run(self) -> None:
        """The loop: until :meth:`stop`, consume a batch, process it, commit offsets."""
        self._join()
        rejoins: list[float] = []  # monotonic times of the rejoins in the window
        try:
            while not self._stopping.is_set():
                try:
                    self._poll()
                except (KafkaException, MembershipLost, DeliveryError) as e:
                    if isinstance(e, MembershipLost):  # the consumer's positions are stale
                        why = e.error.str()
                    elif isinstance(e, DeliveryError):  # a producer that gets nowhere
                        why = str(e)
                    else:
                        found = kafka_error(e)
                        if found is None or not is_fatal(found):
                            raise
                        why = found.str()
                    now = time.monotonic()
                    rejoins = [r for r in rejoins if now - r < REJOIN_WINDOW_S] + [now]
                    if len(rejoins) > REJOINS_PER_WINDOW:
                        raise FencedTooOften(why, self.config.instance_id()) from None
                    self._rejoin(why)
            # a graceful stop (SIGTERM): publish and commit what was processed, so that a
            # restart re-reads nothing (a kill -9 leaves that work to the restart instead)
            self.operator.commit_all()
        finally:
            self._close()

    def _join(self) -> None:
        """A new consumer, subscribed to the input topic (a static member when configured)."""
        c = self.config
        settings = consumer_config(c)
        instance = settings.get("group.instance.id")
        phase("joining group",
              f"{c.app_id!r} for topic {self.topic!r} as "
              + (f"static member {instance!r}" if instance else "a dynamic member")
              + f" (session timeout {c.session_timeout_s:g} s): waiting for the group "
              "coordinator to assign partitions")
        self._waiting_since = time.monotonic()
        consumer = self._consumer = Consumer(settings)
        self.operator.group_metadata = consumer.consumer_group_metadata
        self._consumer.subscribe([self.topic], on_assign=self._on_assign,
                                 on_revoke=self._on_revoke, on_lost=self._on_lost)

    def _close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except (KafkaException, RuntimeError) as e:  # a failed consumer may refuse
                log.warning("input consumer not closed cleanly (%s)", e)

    def _rejoin(self, why: str) -> None:
        """After a fatal consumer error, a fenced or stuck producer, or offsets the group
        refused: close the partitions' states (at their committed watermarks, so nothing is
        lost or counted twice), their producers and the consumer; join again."""
        log.warning("a Kafka client failed for good (%s: the input consumer, or a partition's "
                    "producer fenced after its transaction timed out or getting nowhere): "
                    "closing the partitions' states and producers and joining the group again",
                    why)
        self._release(sorted(self.operator.processors))
        self._close()
        self._join()

    def _poll(self) -> None:
        """One batch: consume, process, commit offsets, observe (tick markers are written by
        their own thread, :mod:`dpsynth.stream.ticker`)."""
        c, consumer = self.config, self._consumer
        assert consumer is not None
        messages = consumer.consume(c.batch_max_events, timeout=c.batch_within_s)
        self.operator.health.polled()
        if messages:
            self._handle(messages)
        self.operator.checkpoint(idle=not messages)
        self._observe(consumer)
        self._log_waiting()

    # -- batches ---------------------------------------------------------------------------

    def _handle(self, messages: list[Message]) -> None:
        by_partition: dict[int, list[InputMessage]] = {}
        received = time.monotonic()
        for m in messages:
            err = m.error()
            if err is not None:
                self._on_error(err)
                continue
            kind, ts = m.timestamp()
            partition, offset = m.partition(), m.offset()
            assert partition is not None and offset is not None  # set where there is no error
            by_partition.setdefault(partition, []).append(InputMessage(
                offset=offset, value=m.value(), timestamp_ms=ts if kind else None,
                received=received, key=m.key()))
        if by_partition:
            self.operator.handle(by_partition)

    def _on_error(self, err: KafkaError) -> None:
        if is_fatal(err):
            raise KafkaException(err)
        if err.code() == KafkaError.INVALID_SESSION_TIMEOUT:  # retried for ever otherwise
            raise ConfigError(
                f"the broker refuses DPSYNTH_SESSION_TIMEOUT_S={self.config.session_timeout_s:g} "
                "(outside its group.min.session.timeout.ms … group.max.session.timeout.ms, "
                "6 s … 30 min by default): set a value in the broker's range")
        if err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            log.error("input topic %r does not exist (any more): create it with `dpsynth topics "
                      "create` or fix DPSYNTH_INPUT_TOPIC (%s)", self.topic, err.str())
        else:
            log.warning("input consumer: %s", err.str())

    # -- rebalances (called by librdkafka inside consume(), in this thread) ---------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        mine = sorted(tp.partition for tp in partitions if tp.topic == self.topic)
        phase("partitions assigned", f"{mine} of {self.topic!r} after "
              f"{time.monotonic() - self._waiting_since:.1f} s; loading their state")
        self.operator.assign(mine)
        self.operator.health.assigned(True)
        phase("ready", f"partitions {sorted(self.operator.processors)} loaded; consuming")

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        mine = sorted(tp.partition for tp in partitions if tp.topic == self.topic)
        self._release(mine, commit=True)  # published and committed for the next owner
        log.info("partitions %s revoked; waiting for the group's next assignment", mine)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        mine = sorted(tp.partition for tp in partitions if tp.topic == self.topic)
        log.warning("partitions %s lost (session expired); their state is closed", mine)
        self._release(mine)

    def _release(self, partitions: list[int], *, commit: bool = False) -> None:
        self.operator.revoke(partitions, commit=commit)
        self._waiting_since = time.monotonic()
        if not self.operator.processors:
            self.operator.health.assigned(False)

    # -- observation -----------------------------------------------------------------------

    def _observe(self, consumer: Consumer) -> None:
        """Lag per owned partition (cached high watermarks: no broker round trip)."""
        procs = self.operator.processors
        if not procs:
            self.operator.health.lag(0)
            return
        tps = [TopicPartition(self.topic, p) for p in procs]
        total = 0
        for tp in consumer.position(tps):
            try:
                _, high = consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue
            proc = procs.get(tp.partition)
            if high < 0 or proc is None:
                continue
            position = tp.offset if tp.offset >= 0 else proc.committed + 1
            lag = max(high - max(position, proc.watermark + 1), 0)
            self.operator.metrics.set("lag_messages", tp.partition, lag)
            total += lag
        self.operator.health.lag(total)
        self.operator.observe_ticks()

    def _log_waiting(self) -> None:
        if self.operator.processors:
            return
        waited = time.monotonic() - self._waiting_since
        if waited >= WAIT_LOG_S and int(waited / WAIT_LOG_S) != int(
                (waited - self.config.batch_within_s) / WAIT_LOG_S):
            log.info("still waiting for partitions of %r from group %r (%.0f s): a restarted "
                     "static member gets them back at once; otherwise the coordinator waits "
                     "for the old member's session timeout (%g s) or for a rebalance",
                     self.topic, self.config.app_id, waited, self.config.session_timeout_s)
