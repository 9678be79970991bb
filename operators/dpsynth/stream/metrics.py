"""Operational metrics of the worker in the Prometheus text format (served at ``/metrics``).

Layer: adapter, on ``prometheus_client`` (a registry per worker): counters, gauges and
histograms, each labelled by input ``partition``. A partition's series are removed when it is
revoked (:meth:`Metrics.remove_partition`), so a sum over workers never counts a partition twice.
These are operator metrics: they include counts of dead-lettered and clipped records, which are
never part of a release (docs/design.md D11); the endpoint needs the protection of the worker
itself, not of the synthetic topic.

>>> m = Metrics()
>>> m.inc("records_in", 0, 5)
>>> [line for line in m.render().splitlines() if line.startswith("dpsynth_records_in")]
['dpsynth_records_in_total{partition="0"} 5.0']
"""

from __future__ import annotations

from typing import TypeVar

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# the `_created` series double every counter's exposition and no dashboard of ours reads them
prometheus_client.disable_created_metrics()

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
    "dead_letter_bytes_dropped": ("counter", "Payload bytes of rejected messages not copied into "
                                  "their dead letter (DPSYNTH_DEAD_LETTER_PREFIX_BYTES)."),
    "clipped_values": ("counter", "Values outside the declared bounds, clipped (and counted)."),
    "records_dropped": ("counter", "Valid records beyond their user's bound (privacy unit "
                                   "'user', DPSYNTH_MAX_CONTRIBUTIONS): not counted."),
    "ticks": ("counter", "Ticks ended (each ends with a release)."),
    "tick_markers": ("counter", "Tick markers applied (each ends a step; DPSYNTH_TICK_SECONDS)."),
    "tick_markers_skipped": ("counter", "Tick markers skipped: a period already applied, or "
                                        "another run's (or a forged) marker."),
    "tick_markers_written": ("counter", "Tick markers this worker wrote into the partition."),
    "releases": ("counter", "Releases published (their transaction committed)."),
    "releases_replayed": ("counter", "Releases computed again by a replay below the group's "
                                     "committed offset: published before, dropped."),
    "transactions": ("counter", "Kafka transactions committed (releases, dead letters, latest "
                                "view and input offset together)."),
    "transactions_aborted": ("counter", "Transactions the broker aborted (retried whole)."),
    "latest_view_writes": ("counter", "Releases written to the latest view (compacted topic)."),
    "release_records": ("counter", "Records (header, chunks, end) of delivered releases."),
    "points_records": ("counter", "Records of materialised points produced "
                                  "(DPSYNTH_POINTS_FORMAT), after their release's."),
    "state_commits": ("counter", "Atomic state commits (snapshot chunks + watermark)."),
    "state_chunks_written": ("counter", "Base snapshot chunks written (only changed chunks; "
                                        "most commits write a delta instead)."),
    "state_bytes_written": ("counter", "Bytes written to RocksDB by state commits."),
    "state_topic_bytes_written": ("counter", "Bytes (keys and values) of the state commits "
                                             "written to the state topic."),
    "state_restores": ("counter", "States read back from the state topic (no or old local "
                                  "state)."),
    "t": ("gauge", "Records accepted so far (the synthesizer's t)."),
    "sequence": ("gauge", "Sequence number of the last release."),
    "watermark": ("gauge", "Last input offset included in the committed state."),
    "published": ("gauge", "Last input offset whose output is committed (the group's offset "
                           "minus one)."),
    "lag_messages": ("gauge", "Input messages behind the partition's end (high watermark minus "
                              "the next offset to read)."),
    "tick_age_seconds": ("gauge", "Seconds since the partition's last tick ended (a release) "
                                  "or, before the first, since its state was loaded."),
    "state_bytes": ("gauge", "Size of the last committed snapshot."),
    "state_chunks": ("gauge", "Chunks of the last committed snapshot."),
    "unacked_events": ("gauge", "Input messages processed but not yet covered by a commit."),
    "release_latency_seconds": (
        "histogram",
        "Seconds from the arrival of a tick's last record to its release being delivered.",
    ),
    "state_commit_seconds": ("histogram", "Seconds to snapshot, hash and write one commit."),
    "state_restore_seconds": ("histogram", "Seconds to read a state back from the state topic."),
    "state_load_seconds": ("histogram", "Seconds to load a partition's state when it is "
                                        "assigned (local store, or the state topic)."),
    "replay_seconds": ("histogram", "Seconds to replay input the state lacked (its output was "
                                    "published before)."),
}
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_KINDS = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
_Kind = TypeVar("_Kind", Counter, Gauge, Histogram)


class Metrics:
    """The worker's metrics, per name and input partition (thread-safe: prometheus_client)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._metrics: dict[str, Counter | Gauge | Histogram] = {}
        for name, (kind, help_text) in METRICS.items():
            extra = {"buckets": BUCKETS} if kind == "histogram" else {}
            self._metrics[name] = _KINDS[kind](f"dpsynth_{name}", help_text, ["partition"],
                                               registry=self.registry, **extra)

    def _metric(self, name: str, kind: type[_Kind]) -> _Kind:
        metric = self._metrics.get(name)
        if not isinstance(metric, kind):
            raise KeyError(f"metric {name!r} is not a declared {kind.__name__.lower()}")
        return metric

    def inc(self, name: str, partition: int, value: float = 1) -> None:
        """Add ``value`` to a counter."""
        self._metric(name, Counter).labels(str(partition)).inc(value)

    def set(self, name: str, partition: int, value: float) -> None:
        """Set a gauge."""
        self._metric(name, Gauge).labels(str(partition)).set(value)

    def observe(self, name: str, partition: int, value: float) -> None:
        """Add one observation to a histogram."""
        self._metric(name, Histogram).labels(str(partition)).observe(value)

    def get(self, name: str, partition: int) -> float:
        """Current value of a counter or gauge (0 if never set)."""
        kind = METRICS[name][0]
        sample = f"dpsynth_{name}" + ("_total" if kind == "counter" else "")
        value = self.registry.get_sample_value(sample, {"partition": str(partition)})
        return 0 if value is None else value

    def remove_partition(self, partition: int) -> None:
        """Drop every series of ``partition`` (revoked: its new owner exports them)."""
        for metric in self._metrics.values():
            metric.remove(str(partition))  # a no-op where never set

    def render(self) -> str:
        """All metrics in the Prometheus text exposition format 0.0.4."""
        return generate_latest(self.registry).decode()
