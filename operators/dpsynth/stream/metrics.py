"""Operational metrics of the worker in the Prometheus text format (served at ``/metrics``).

Layer: adapter. A tiny registry (no client library needed): counters, gauges and one
histogram, each labelled by input ``partition``. These are operator metrics: they include
counts of dead-lettered and clipped records, which are never part of a release (DESIGN §3
"Bad input"); the endpoint needs the protection of the worker itself, not of the synthetic topic.

>>> m = Metrics()
>>> m.inc("records_in", 0, 5)
>>> [line for line in m.render().splitlines() if line.startswith("dpsynth_records_in")]
['dpsynth_records_in_total{partition="0"} 5']
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

#: name → (type, help). Counters get the ``_total`` suffix in the exposition.
METRICS: dict[str, tuple[str, str]] = {
    "messages_in": ("counter", "Input messages read (each holds one record or a batch)."),
    "records_in": ("counter", "Valid records fed to the synthesizer (they count into t)."),
    "records_skipped": ("counter",
                        "Records of messages at or below the watermark (replays), not counted."),
    "messages_replayed": ("counter",
                         "Messages read back from the input partition to rebuild lost state."),
    "dead_lettered_messages": ("counter", "Messages sent to the dead-letter topic."),
    "dead_lettered_records": ("counter", "Records rejected (undecodable, missing field, NaN…)."),
    "clipped_values": ("counter", "Values outside the declared bounds, clipped (and counted)."),
    "records_dropped": ("counter", "Valid records beyond their user's bound (privacy unit "
                                   "'user', DPSYNTH_MAX_CONTRIBUTIONS): not counted."),
    "ticks": ("counter", "Ticks ended (each ends with a release)."),
    "tick_markers": ("counter", "Tick markers applied (each ends a step; DPSYNTH_TICK_SECONDS)."),
    "tick_markers_skipped": ("counter", "Tick markers skipped: a period already applied, or "
                                        "another run's (or a forged) marker."),
    "tick_markers_written": ("counter", "Tick markers this worker wrote into the partition."),
    "releases": ("counter", "Releases delivered to the synthetic topic."),
    "release_records": ("counter", "Records (header, chunks, end) of delivered releases."),
    "state_commits": ("counter", "Atomic state commits (snapshot chunks + watermark)."),
    "state_chunks_written": ("counter", "Snapshot chunks written (only changed chunks)."),
    "state_bytes_written": ("counter", "Bytes written to RocksDB by state commits."),
    "t": ("gauge", "Records accepted so far (the synthesizer's t)."),
    "sequence": ("gauge", "Sequence number of the last release."),
    "watermark": ("gauge", "Last input offset included in the committed state."),
    "state_bytes": ("gauge", "Size of the last committed snapshot."),
    "state_chunks": ("gauge", "Chunks of the last committed snapshot."),
    "unacked_events": ("gauge", "Input messages processed but not yet covered by a commit."),
    "release_latency_seconds": (
        "histogram",
        "Seconds from the arrival of a tick's last record to its release being delivered.",
    ),
    "state_commit_seconds": ("histogram", "Seconds to snapshot, hash and write one commit."),
}
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass
class _Histogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0
    n: int = 0


class Metrics:
    """Thread-safe metric values, per name and input partition."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, int], float] = {}
        self._hist: dict[tuple[str, int], _Histogram] = {}

    def _check(self, name: str, kind: str) -> None:
        if METRICS.get(name, ("", ""))[0] != kind:
            raise KeyError(f"metric {name!r} is not a declared {kind}")

    def inc(self, name: str, partition: int, value: float = 1) -> None:
        """Add ``value`` to a counter."""
        self._check(name, "counter")
        with self._lock:
            key = (name, partition)
            self._values[key] = self._values.get(key, 0) + value

    def set(self, name: str, partition: int, value: float) -> None:
        """Set a gauge."""
        self._check(name, "gauge")
        with self._lock:
            self._values[(name, partition)] = value

    def observe(self, name: str, partition: int, value: float) -> None:
        """Add one observation to a histogram."""
        self._check(name, "histogram")
        with self._lock:
            h = self._hist.setdefault((name, partition), _Histogram())
            h.counts[bisect.bisect_left(BUCKETS, value)] += 1
            h.total += value
            h.n += 1

    def get(self, name: str, partition: int) -> float:
        """Current value of a counter or gauge (0 if never set)."""
        with self._lock:
            return self._values.get((name, partition), 0)

    def render(self) -> str:
        """All metrics in the Prometheus text exposition format 0.0.4."""
        lines: list[str] = []
        with self._lock:
            for name, (kind, help_text) in METRICS.items():
                full = f"dpsynth_{name}" + ("_total" if kind == "counter" else "")
                lines.append(f"# HELP {full} {help_text}")
                lines.append(f"# TYPE {full} {kind}")
                if kind == "histogram":
                    for (n, p), h in sorted(self._hist.items()):
                        if n == name:
                            lines.extend(_histogram_lines(full, p, h))
                    continue
                for (n, p), value in sorted(self._values.items()):
                    if n == name:
                        lines.append(f'{full}{{partition="{p}"}} {_num(value)}')
        return "\n".join(lines) + "\n"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _histogram_lines(full: str, partition: int, h: _Histogram) -> list[str]:
    out, cumulative = [], 0
    for bound, count in zip((*BUCKETS, float("inf")), h.counts, strict=True):
        cumulative += count
        le = "+Inf" if bound == float("inf") else repr(bound)
        out.append(f'{full}_bucket{{partition="{partition}",le="{le}"}} {cumulative}')
    out.append(f'{full}_sum{{partition="{partition}"}} {_num(h.total)}')
    out.append(f'{full}_count{{partition="{partition}"}} {h.n}')
    return out
