"""The tick marker writer: public time on its own timer, independent of the processing.

Layer: adapter. A thread of the worker (:class:`MarkerWriter`) with its own idempotent
producer outside transactions (:class:`~dpsynth.stream.sink.KafkaSink`) writes the tick markers
(:mod:`dpsynth.stream.ticks`) of every input partition the worker owns: for each owned partition,
exactly one marker per wall-clock period ⌊now/P⌋·P, for *every* period boundary passed, in order.
If the thread falls behind (a GC pause, a stalled broker, a machine that was suspended) it writes
every period it missed, oldest first, never skipping one. The input thread only says which
partitions the worker owns (:meth:`MarkerWriter.own`, :meth:`MarkerWriter.disown`); however long
a batch, a catch-up or a state restore takes, the markers go on (privacy: P11). So the number
of markers written between two instants depends only on the clock, the period and when the
worker owned the partition — operational facts, never the data's volume or the processing speed.

Ownership: when a partition is assigned, the marker of the current period is written at once
(a new owner need not wait up to one period; a copy of a period already written by the previous
owner is skipped by the processor), then one per boundary until the partition is revoked.
Periods whose boundaries pass while *no* worker owns the partition (all workers down, or a
rebalance longer than a period) are not written afterwards: their records join the step that
ends at the first marker after the restart (docs/operator.md "Downtime"). Backfilled markers
could only be appended after those records, so they would add empty steps and no information.

The clock is injectable (:class:`TickClock`): a test drives the periods without waiting.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import Protocol

from dpsynth.stream.metrics import Metrics
from dpsynth.stream.sink import DeliveryError
from dpsynth.stream.ticks import MarkerKey, period_start_ms

log = logging.getLogger(__name__)

#: Key of every marker message (never a user id: markers are not records).
MARKER_MESSAGE_KEY = b"dpsynth-tick"
#: Seconds before writing again after a failed delivery (the cursor did not move: nothing is
#: skipped, the markers are written again).
RETRY_S = 1.0
#: A catch-up longer than this many periods is logged (a clock jump, a suspended machine).
LOG_BEHIND_PERIODS = 100
#: Exit status when the writer thread fails for good (no markers: no steps).
EXIT_FATAL = 3


class MarkerSink(Protocol):
    """Where markers go (:class:`~dpsynth.stream.sink.KafkaSink`; a test's memory sink)."""

    def send(self, topic: str, key: bytes, value: bytes | None,
             partition: int | None = None) -> None:
        """Queue one record."""

    def flush(self) -> None:
        """Wait until every queued record is delivered, or raise."""


class TickClock:
    """The writer's clock: wall time (periods are wall-clock periods) and a wait.

    The default is the system's; a test injects its own whose :meth:`now` it sets.
    """

    def now(self) -> float:
        """Seconds since the epoch."""
        return time.time()

    def wait(self, seconds: float, wake: threading.Event) -> None:
        """Sleep ``seconds`` of this clock, or until ``wake`` is set."""
        wake.wait(max(seconds, 0.0))


class MarkerWriter:
    """Writes one marker per owned input partition and period (see the module docstring).

    Thread-safe: :meth:`own` and :meth:`disown` are called by the input thread, the writing runs
    in this writer's thread (:meth:`start`, :meth:`stop`) or in :meth:`write_due` directly.
    """

    def __init__(self, topic: str, period_s: float, markers: MarkerKey, sink: MarkerSink, *,
                 clock: TickClock | None = None, metrics: Metrics | None = None) -> None:
        if period_s <= 0:
            raise ValueError("a marker writer needs a positive period")
        self.topic = topic
        self.period_s = float(period_s)
        self.period_ms = round(period_s * 1000)
        self.markers = markers
        self.sink = sink
        self.clock = clock or TickClock()
        self.metrics = metrics or Metrics()
        self._lock = threading.Lock()
        self._next: dict[int, int] = {}  # owned partition → at_ms of its next marker to write
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- ownership (input thread) ----------------------------------------------------------

    def own(self, partitions: Iterable[int]) -> None:
        """Start writing markers for ``partitions``, the current period's at once."""
        now_ms = period_start_ms(self.clock.now(), self.period_s)
        with self._lock:
            for partition in partitions:
                self._next.setdefault(int(partition), now_ms)
        self._wake.set()

    def disown(self, partitions: Iterable[int]) -> None:
        """Stop writing markers for ``partitions`` (revoked, lost)."""
        with self._lock:
            for partition in partitions:
                self._next.pop(int(partition), None)

    def owned(self) -> list[int]:
        """The partitions this writer writes markers for."""
        with self._lock:
            return sorted(self._next)

    # -- writing ---------------------------------------------------------------------------

    def due(self) -> list[tuple[int, int]]:
        """(partition, at_ms) of every marker due now: each owned partition's periods from its
        next one through the current one, period by period (oldest first)."""
        now_ms = period_start_ms(self.clock.now(), self.period_s)
        with self._lock:
            pending = dict(self._next)
        out = [(partition, at_ms) for partition, first in pending.items()
               for at_ms in range(first, now_ms + 1, self.period_ms)]
        return sorted(out, key=lambda item: (item[1], item[0]))

    def write_due(self) -> int:
        """Write every due marker, flush, and move the partitions' cursors past them; the
        number written. A failed delivery raises :class:`DeliveryError` and moves no cursor
        (the same markers are written again; a copy that did arrive is skipped)."""
        due = self.due()
        if not due:
            return 0
        if len(due) > LOG_BEHIND_PERIODS * max(len({p for p, _ in due}), 1):
            log.warning("tick markers: %d periods behind (a clock jump or a suspended machine?); "
                        "writing every one of them in order", len(due))
        for partition, at_ms in due:
            self.sink.send(self.topic, MARKER_MESSAGE_KEY, self.markers.encode(partition, at_ms),
                           partition=partition)
        self.sink.flush()
        with self._lock:
            for partition, at_ms in due:
                if partition in self._next and self._next[partition] <= at_ms:
                    self._next[partition] = at_ms + self.period_ms
                    self.metrics.inc("tick_markers_written", partition)
        return len(due)

    def seconds_to_next_boundary(self) -> float:
        """Seconds of the clock until the next period starts."""
        now = self.clock.now()
        next_ms = period_start_ms(now, self.period_s) + self.period_ms
        return max(next_ms / 1000 - now, 0.0)

    # -- thread ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the writer's thread."""
        self._stopping.clear()
        self._thread = threading.Thread(target=self._main, name="dpsynth-ticks", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread (markers already queued are flushed first), wait for it, and close
        the producer."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        close = getattr(self.sink, "close", None)
        if close is not None:
            close()

    def _main(self) -> None:
        try:
            self.run()
        except BaseException as e:  # noqa: BLE001 - without markers no step would ever end
            log.critical("fatal: the tick marker writer failed (%s: %s); exiting with status "
                         "%d (state on disk is consistent: restart)", type(e).__name__, e,
                         EXIT_FATAL)
            logging.shutdown()
            os._exit(EXIT_FATAL)

    def run(self) -> None:
        """Until :meth:`stop`: write what is due, sleep until the next boundary (or a wake)."""
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                self.write_due()
            except DeliveryError as e:
                log.warning("tick markers not delivered (%s); writing them again in %g s", e,
                            RETRY_S)
                self.clock.wait(RETRY_S, self._stopping)
                continue
            # a hair past the boundary, so that the next pass is in the next period
            self.clock.wait(self.seconds_to_next_boundary() + 0.001, self._wake)

