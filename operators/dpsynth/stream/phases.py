"""The worker's start-up phases in its log, each with the seconds since the process started.

Layer: adapter. One INFO line per phase, in the order a start passes them::

    start-up [0.6 s] config checked: run 'r1', input 'raw-events', engine points
    start-up [0.7 s] connecting: broker 127.0.0.1:9092
    start-up [0.9 s] connected: topic partitions {...}
    start-up [0.9 s] compiling kernels: numba (cached after the first start)
    start-up [1.4 s] kernels ready: 0.5 s
    start-up [1.6 s] joining group: 'dpsynth-r1' as static member 'worker-0'
    start-up [4.2 s] partitions assigned: [0, 1]
    start-up [4.3 s] restoring partition 0: 1234 bytes from the local state
    start-up [4.4 s] ready: partitions [0, 1] loaded; consuming

A partition whose state is behind the group's offset logs a further ``restoring partition p``
line (from the state topic, or by replay) when its first batch arrives. The seconds count from
the start of the process (``/proc/self/stat``; where that is unreadable, from this module's
import), so interpreter start-up and imports are included. ``docs/operator.md`` "Start-up".
"""

from __future__ import annotations

import logging
import os
import time

log = logging.getLogger("dpsynth.startup")

#: The phases, in order (a restart passes each once; ``restoring partition`` once per partition).
PHASES = ("config checked", "connecting", "connected", "compiling kernels", "kernels ready",
          "joining group", "partitions assigned", "restoring partition", "ready")

_IMPORTED = time.monotonic()


def _process_start_offset() -> float:
    """Seconds the process had run when this module was imported (0 where unknown)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime_s = float(f.read().split()[0])
        started_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
        return max(uptime_s - started_s, 0.0)
    except (OSError, ValueError, IndexError):
        return 0.0


_OFFSET = _process_start_offset()


def process_age_s() -> float:
    """Seconds since the process started."""
    return _OFFSET + time.monotonic() - _IMPORTED


def phase(name: str, detail: str = "") -> None:
    """Log one start-up phase (``name`` from :data:`PHASES`, followed by ``detail``)."""
    log.info("start-up [%.1f s] %s%s", process_age_s(), name, f": {detail}" if detail else "")
