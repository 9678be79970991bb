"""The worker's own settings (``DPSYNTH_*``): one declaration each, beside the synthesis ones.

Layer: core (standard library only); the pydantic-settings model is generated from these in
:mod:`dpsynth.settings`. ``group`` sorts the docs' table: ``worker`` (what every deployment
sets or should know) and ``tuning``.
"""

from __future__ import annotations

from typing import Any

from dpsynth.params.choices import Engine, LogLevel, PointsFormat
from dpsynth.params.core import Param

#: Points at which a test may make the worker exit as if killed (never set in production).
#: In the order a commit passes them (docs/operator.md "The commit protocol").
CRASH_POINTS = ("mid_tick", "mid_release", "after_release_produced", "after_transaction_commit",
                "after_state_commit")
TOPIC = r"[A-Za-z0-9._-]{1,249}"
IDENT = r"(|[A-Za-z0-9._-]{1,200})"
TOPIC_RULE = "must be a Kafka topic name: 1-249 characters of [A-Za-z0-9._-]"
IDENT_RULE = "must be 1-200 characters of [A-Za-z0-9._-] (e.g. the pod name of a StatefulSet)"


def crash_at(value: Any) -> tuple[str, int] | None:
    """``POINT:N`` (a test hook): exit at the N-th time the worker reaches POINT."""
    if value is None or isinstance(value, tuple):
        return value
    point, _, count = str(value).strip().partition(":")
    if point not in CRASH_POINTS or not count.isdigit() or int(count) < 1:
        raise ValueError(f"must be POINT:N with N >= 1 and POINT one of {CRASH_POINTS} (a test "
                         "hook: unset it in production)")
    return point, int(count)


def _w(name: str, kind: str, help: str, **kw: Any) -> Param:
    return Param(name, kind, help, group=kw.pop("group", "worker"), **kw)


def _t(name: str, kind: str, help: str, **kw: Any) -> Param:
    return Param(name, kind, help, group="tuning", **kw)


WORKER = [
    _w("broker", "text", "The Kafka bootstrap servers: host:port,host:port (or "
       "kafka://host:port;kafka://host:port)."),
    _w("input_topic", "text", "The raw-events topic.", default="dpsynth-raw-events",
       pattern=TOPIC, rule=TOPIC_RULE),
    _w("output_topic", "text", "The synthetic topic (releases).", default="dpsynth-synthetic",
       pattern=TOPIC, rule=TOPIC_RULE),
    _w("dead_letter_topic", "text", "Rejected input messages, with a reason (holds raw data).",
       default="dpsynth-dead-letter", pattern=TOPIC, rule=TOPIC_RULE),
    _w("points_format", "choice", "Also publish every release's points, in the schema's units "
       "and column names: none, or arrow (Arrow IPC, chunked like releases; needs "
       "dpsynth[points]). dpsynth run writes OUT/points/; the worker DPSYNTH_POINTS_TOPIC.",
       choices=PointsFormat, default="none", scopes=frozenset({"run", "worker"}),
       privacy="Post-processing of the release (the same points every reader computes)."),
    _w("points_topic", "text", "points_format arrow: the topic of the materialised points.",
       default="dpsynth-synthetic-points", pattern=TOPIC, rule=TOPIC_RULE),
    _w("latest_view", "bool", "Also keep each partition's latest release in a compacted "
       "topic (the latest view: a late subscriber reads one release per partition).",
       default=True),
    _w("latest_topic", "text", "The latest view's compacted topic (unset: the output topic's "
       "name + -latest).", default="", pattern=r"(|[A-Za-z0-9._-]{1,249})", rule=TOPIC_RULE),
    _w("changelog", "bool", "Also write every state commit (a delta, or a new base) to the "
       "compacted state topic, in the release transactions: a partition restores from it "
       "without local state, in time proportional to the state.", default=True,
       privacy="The state topic holds raw data (the open step's records at the tree's "
       "resolution, exact counts): protect it like the raw-events topic."),
    _w("state_topic", "text", "The state topic (unset: the consumer group id + -state).",
       default="", pattern=r"(|[A-Za-z0-9._-]{1,249})", rule=TOPIC_RULE),
    _w("engine", "choice", "points: records mapped by a schema to [0,1]^d; tabular: records "
       "over a finite domain.", choices=Engine, default="points"),
    _w("schema_file", "text", "engine points: the record schema (schemas/record-schema.v1.json).",
       default=""),
    _w("domain_file", "text", "engine tabular: the domain (schemas/domain.v1.json).",
       default=""),
    _w("tick_seconds", "float", "Period P of the tick markers written into every input "
       "partition (0: none; replacement only).", low=0.0, default=60.0,
       privacy="Public time: under add/remove the only end of a step (P11)."),
    _w("run_id", "text", "The run's id in every release (unset: run-<key fingerprint>).",
       default="", pattern=IDENT, rule=IDENT_RULE,
       privacy="One run id, one key (P13): a run id published under another key is refused."),
    _w("key_check_records", "int", "Records read from the end of each output partition for "
       "the key check at start.", low=0, default=10_000),
    _w("input_partitions", "int", "privacy_unit user: the input topic's partition count "
       "(0: read from the broker at start); bound to the state.", low=0, default=0),
    _w("user_cache_entries", "int", "privacy_unit user: users whose counts stay in memory "
       "between commits.", low=1, default=1 << 20),
    _w("data_dir", "path", "The worker's state (RocksDB) and lock.", default="dpsynth-data",
       privacy="Holds raw data (the open step's records at the tree's resolution, exact "
       "counts): protect it like the raw-events topic."),
    _w("state_dir", "text", "Where a noise key's binding to its input is recorded, "
       "keys/<key fingerprint>.json (unset: $XDG_STATE_HOME/dpsynth, else "
       "~/.local/state/dpsynth); keep it on a volume that outlives the run's data "
       "directories.", default="",
       privacy="One key, one input (P13): the same key over another input topic is refused."),
    _w("noise_key_hex", "secret", "The run's secret noise key, 64 hex characters (or "
       "DPSYNTH_NOISE_KEY_FILE).", default=None, optional=True, variable="DPSYNTH_NOISE_KEY",
       privacy="Never logged or released; its fingerprint names it."),
    _w("noise_key_file", "text", "A file holding the noise key (readable only by the worker).",
       default=None, optional=True),
    _w("web_port", "int", "Port of /healthz, /readyz and /metrics.", low=1, high=65535,
       default=6066),
    _w("web_bind", "text", "Address the web port binds.", default="0.0.0.0"),  # noqa: S104
    _w("group_id", "text", "The input consumer group (unset: dpsynth-<run id>).", default="",
       pattern=IDENT, rule=IDENT_RULE),
    _w("group_instance_id", "text", "Static membership id (unset: derived from the host and "
       "data directory; off: dynamic membership).", default="", pattern=IDENT,
       rule=IDENT_RULE),
    _w("dead_letter_prefix_bytes", "int", "Bytes of a rejected message's payload copied into "
       "its dead letter (raw data: 0).", low=0, high=65_536, default=0),
    _w("liveness_timeout_s", "float", "/healthz fails when the input loop did not poll, or did "
       "not advance while input waits, for this long.", low=1.0, default=120.0),
    _w("log_level", "choice", "The worker's log level.", choices=LogLevel, default="info"),
    _t("batch_max_events", "int", "Largest batch of input messages.", low=1, default=2000),
    _t("batch_within_s", "float", "Longest wait to fill a batch.", low=0.0, strict=True,
       default=0.1),
    _t("release_linger_s", "float", "How long a completed release waits to be published "
       "with others.", low=0.0, default=0.2),
    _t("checkpoint_interval_s", "float", "Longest time between two state commits while "
       "input flows.", low=0.0, strict=True, default=5.0),
    _t("state_commit_interval_s", "float", "Least time between two state commits while "
       "releases flow.", low=0.0, default=1.0),
    _t("max_unacked_events", "int", "Messages processed before a state commit is forced.",
       low=1, default=20_000),
    _t("latest_interval_s", "float", "Least time between two writes of a partition's latest "
       "view (0: with every release transaction).", low=0.0, default=5.0),
    _t("transaction_timeout_s", "float", "transaction.timeout.ms of the release producers: a "
       "dead worker's open transaction holds read_committed readers at most this long plus "
       "the broker's abort scan (transaction.abort.timed.out.transaction.cleanup.interval.ms).",
       low=1.0, high=900.0, default=5.0),
    _t("state_chunk_bytes", "int", "Size of a state chunk in RocksDB.", low=4096,
       high=64 * 2**20, default=256 * 1024),
    _t("state_sync", "bool", "fsync every state commit.", default=True),
    _t("rocksdb_block_cache_bytes", "int", "RocksDB block cache.", low=0, default=8 * 2**20),
    _t("rocksdb_write_buffer_bytes", "int", "RocksDB write buffer.", low=2**16,
       default=4 * 2**20),
    _t("release_max_record_bytes", "int", "Largest record of a release on the synthetic "
       "topic (releases are chunked).", low=1024, high=1_000_000, default=256_000),
    _t("session_timeout_s", "float", "The consumer group session timeout (within the "
       "broker's group session range).", low=1.0, default=6.0),
    _t("max_batch_seconds", "float", "Longest batch (seconds between two polls) before the "
       "group takes the partitions away.", low=10.0, default=300.0),
    _t("max_input_message_bytes", "int", "Largest input message the consumer accepts.",
       low=1_048_576, high=2**30, default=128 * 2**20),
    _t("crash_at", "custom", "A test hook, POINT:N: exit as if killed (never set in "
       "production).", default=None, optional=True, parser=crash_at),
]
