"""Liveness and readiness of the worker (``/healthz``, ``/readyz``).

Layer: adapter. The input loop (:mod:`dpsynth.stream.intake`) stamps what it does; the web
pages read the stamps (another thread: plain floats and booleans, no lock needed).

- **live**: the loop polled within ``timeout_s`` *and* either it processed input within
  ``timeout_s`` or it has nothing to do (no lag). A loop stuck in a delivery, a state commit or
  a fetch that never returns fails the probe, and so does one that polls but never advances
  while records wait; an idle worker with no lag stays live.
- **ready**: live, and the group has assigned this worker its partitions (possibly none) and
  their state is loaded.

>>> clock = [0.0]
>>> h = Health(timeout_s=60.0, now=lambda: clock[0])
>>> clock[0] = 100.0; h.polled(); h.lag(5); h.live()
(False, 'no input processed for 100 s while 5 messages wait')
>>> h.progressed(); h.live()
(True, 'ok')
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Health:
    """Stamps of the input loop, and the verdicts of the probes."""

    def __init__(self, timeout_s: float, now: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s = timeout_s
        self._now = now
        self._polled = self._progressed = now()  # starting counts as activity
        self._lag = 0
        self._assigned = False

    def polled(self) -> None:
        """The loop asked the broker for input (it is not stuck)."""
        self._polled = self._now()

    def progressed(self) -> None:
        """Input was processed (a batch, or a commit during a long replay)."""
        self._progressed = self._polled = self._now()

    def lag(self, messages: int) -> None:
        """Messages behind the ends of the owned partitions."""
        self._lag = int(messages)

    def assigned(self, joined: bool) -> None:
        """The group assigned this worker its partitions (True) or took them back (False)."""
        self._assigned = joined

    def live(self) -> tuple[bool, str]:
        """(verdict, reason) of the liveness probe."""
        now = self._now()
        if now - self._polled > self.timeout_s:
            return False, f"the input loop has not polled for {now - self._polled:.0f} s"
        if self._lag > 0 and now - self._progressed > self.timeout_s:
            return False, (f"no input processed for {now - self._progressed:.0f} s while "
                           f"{self._lag} messages wait")
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """(verdict, reason) of the readiness probe."""
        live, reason = self.live()
        if not live:
            return False, reason
        if not self._assigned:
            return False, "waiting for the consumer group to assign partitions"
        return True, "ok"
