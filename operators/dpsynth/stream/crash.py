"""Deterministic crash points for crash-recovery tests (``DPSYNTH_CRASH_AT=POINT:N``).

Layer: adapter. A test hook, inert unless the variable is set: at the N-th time the worker
reaches POINT it logs one line and sends itself SIGKILL, so the crash is as abrupt as a killed
pod (no ``finally``, no flush, no graceful rebalance). The points, in the order a commit passes
them (``docs/operator.md``):

``mid_tick``
    records were fed to the synthesizer and the tick is still open; nothing produced or stored.
``mid_release``
    half of a release's records (header and the first chunks) are on the broker, in a
    transaction still open.
``after_release_produced``
    every record of the transaction is on the broker (releases, latest view, dead letters),
    the transaction (and the input offset in it) is not committed.
``after_transaction_commit``
    the transaction is committed (records visible, input offset committed); the state is not.
``after_state_commit``
    state and watermark were committed too.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable

log = logging.getLogger(__name__)


class CrashPoints:
    """Counts visits to each point; kills the process at the configured visit.

    ``action`` replaces the SIGKILL (unit tests raise an exception instead).

    >>> points = CrashPoints(None)
    >>> points.reached("mid_tick")   # inert without DPSYNTH_CRASH_AT
    """

    def __init__(
        self, crash_at: tuple[str, int] | None, action: Callable[[str], None] | None = None
    ) -> None:
        self.crash_at = crash_at
        self.action = action or _sigkill_self
        self.visits: dict[str, int] = {}

    def armed(self, point: str) -> bool:
        """True when ``point`` is the configured crash point (some paths split work for it)."""
        return self.crash_at is not None and self.crash_at[0] == point

    def reached(self, point: str) -> None:
        """Record a visit of ``point``; SIGKILL this process if it is the configured one."""
        if self.crash_at is None:
            return
        self.visits[point] = self.visits.get(point, 0) + 1
        target, count = self.crash_at
        if point == target and self.visits[point] == count:
            log.warning("DPSYNTH_CRASH_AT=%s:%d reached: killing this worker (SIGKILL)",
                        point, count)
            self.action(point)


def _sigkill_self(point: str) -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
