"""The worker's input loop and marker writer in the test's process, on a real broker (our kit).

What ``dpsynth worker`` runs minus Faust (web server, signals): the derived topics, the
:class:`~dpsynth.stream.partitions.Operator` with Kafka's transactional producers, the
:class:`~dpsynth.stream.intake.InputLoop` in a thread, and the tick marker writer on a clock the
test injects, so a test can hold a batch (``gate``) while it moves the clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dpsynth.cli.worker import check_topics
from dpsynth.stream.intake import InputLoop
from dpsynth.stream.partitions import Operator
from dpsynth.stream.settings import WorkerConfig
from dpsynth.stream.ticker import TickClock
from dpsynth.stream.topics import ensure_compacted


class Gate:
    """Holds the first batch of records inside ``Operator.handle`` until :meth:`open`."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self._open = threading.Event()

    def wrap(self, handle: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``handle``, blocking the first call until the gate opens (a slow batch)."""
        def held(batch: Any) -> Any:
            if not self.entered.is_set():
                self.entered.set()
                self._open.wait(120)  # a hang guard
            return handle(batch)
        return held

    def open(self) -> None:
        """Let the held batch go on."""
        self._open.set()


@contextmanager
def running_worker(config: WorkerConfig, clock: TickClock, gate: Gate | None = None
                   ) -> Iterator[Operator]:
    """The worker's input loop and marker writer, running until the block ends."""
    partitions = check_topics(config)
    latest, state = config.latest_topic_name, config.state_topic_name
    for topic in (latest, state):
        if topic is not None:
            partitions[topic] = ensure_compacted(config.bootstrap_servers(), topic,
                                                 partitions[config.input_topic],
                                                 max_message_bytes=2_000_000)
    operator = Operator(config, tick_clock=clock,
                        latest_partitions=partitions.get(latest or "", 1),
                        state_partitions=partitions.get(state or "", 1),
                        output_partitions=partitions[config.output_topic],
                        points_partitions=partitions.get(config.points_topic, 1))
    if gate is not None:
        operator.handle = gate.wrap(operator.handle)  # type: ignore[method-assign]
    loop = InputLoop(config, operator)
    loop.thread = threading.Thread(target=loop.run, name="test-input", daemon=True)
    assert operator.ticker is not None
    operator.ticker.start()
    loop.thread.start()
    try:
        yield operator
    finally:
        if gate is not None:
            gate.open()
        loop.stop(60)
        operator.ticker.stop()
        operator.close()


def wait_until(condition: Callable[[], Any], timeout_s: float = 90.0) -> Any:
    """Poll ``condition`` until it is truthy; a hang guard, never a timing assertion."""
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        assert time.monotonic() < deadline, "hang guard: the condition never held"
        time.sleep(0.02)
    return found
