"""Catching a partition up with its group's offset: from the state topic, else by replay.

Layer: adapter (no Kafka: the replay reader and the state topic's reader are injected). Part of
:class:`~dpsynth.stream.processor.PartitionProcessor` (a mixin, kept apart so that each module
stays one concept): a partition whose state is behind the offset its group committed — no
local state, an old one, or a crash between a transaction and the state commit after it — is
brought forward before its first delivered message: from the state topic when the gap is long
(:mod:`dpsynth.stream.persist`), then by replaying the rest of the input. Nothing of a replay is
published: the transactions that moved the group's offset published it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dpsynth.stream.engines import check_bound, open_engine
from dpsynth.stream.phases import phase

if TYPE_CHECKING:
    from dpsynth.stream.processor import PartitionProcessor

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InputMessage:
    """One raw-events message as the processor needs it."""

    offset: int
    value: bytes | None
    timestamp_ms: int | None = None
    received: float = 0.0  # time.monotonic() when the worker got it (release latency)
    key: bytes | None = None  # the Kafka key: the user id under the privacy unit "user"


#: replay(partition, start, end) yields the input messages of offsets [start, end), in order.
Replay = Callable[[int, int, int], Iterable[InputMessage]]
#: Messages fed per step while rebuilding a partition by replay.
REPLAY_BATCH = 5000


def from_state_topic(self: PartitionProcessor, first: int) -> None:
    """Adopt the state topic's state when it is newer than the local one (and older than
    ``first``, the group's offset: it always is)."""
    stored = self.state.newer_from_topic(self.watermark, first)
    if stored is None:
        return
    check_bound(self.config, self._public_config, stored.config, self.partition,
                self.state.topic)
    self.synth = open_engine(self.config, self.partition, stored.snapshot, self.store)
    self.committed = self.watermark = stored.watermark
    self.last_tick_ms = stored.last_tick_ms
    self.output.latest_records = max(self.output.latest_records, stored.latest_records)

def catch_up(self: PartitionProcessor, first: int) -> None:
    """Feed offsets (watermark, first) read back from the input partition, in batches,
    dropping their output: the transactions that moved the group's offset to ``first``
    published it."""
    start = self.watermark + 1
    log.warning(
        "partition %d: the first input offset delivered (%d) is beyond the local state "
        "(watermark %d); replaying offsets [%d, %d) from the input partition to rebuild it",
        self.partition, first, self.watermark, start, first,
    )
    assert self.replay is not None
    self.replaying, started = True, time.perf_counter()
    batch: list[InputMessage] = []
    replayed = 0
    try:
        for message in self.replay(self.partition, start, first):
            if message.offset >= first:
                break
            batch.append(message)
            if len(batch) >= REPLAY_BATCH:
                replayed += _feed_replayed(self, batch)
                batch = []
        if batch:
            replayed += _feed_replayed(self, batch)
    finally:
        self.replaying = False
    self.published = max(self.published, first - 1)
    self.metrics.observe("replay_seconds", self.partition, time.perf_counter() - started)
    phase(f"restoring partition {self.partition}",
          f"{replayed} messages replayed from the input partition in "
          f"{time.perf_counter() - started:.1f} s (t={self.synth.t})")

def _feed_replayed(self: PartitionProcessor, batch: list[InputMessage]) -> int:
    self.metrics.inc("messages_replayed", self.partition, len(batch))
    self.feed(batch)
    self.output.discard()  # published by the transactions that moved the group's offset
    if self.checkpoint_due():
        self.commit()
    self.progress()
    return len(batch)

