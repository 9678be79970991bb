"""``dpsynth topics create``: the raw-events, synthetic and dead-letter topics of a worker.

Layer: adapter (confluent-kafka's AdminClient, imported lazily). What the worker needs of its
topics, and why the defaults are what they are (``docs/operator.md`` "Topics"):

- **raw events** (sensitive): one partition per worker you plan to run (a partition is the unit
  of state and of parallel composition); kept for as long as the run lasts by default
  (``retention.ms=-1``): a worker that loses its state rebuilds it by replaying the partition
  from offset 0, and refuses to continue once those records are deleted;
- **synthetic** (ε-DP releases, the history): a release is a header, chunks of at most
  ``DPSYNTH_RELEASE_MAX_RECORD_BYTES`` and an end record, so ``max.message.bytes`` is set to fit
  the largest chunk; the history is kept 7 days by default (``--output-retention-ms``) and
  without a size bound (``--output-retention-bytes``, per partition; ``docs/operator.md``
  "Sizing the history" says how to choose);
- **latest view** (``<synthetic>-latest``, or ``--latest-topic``): each input partition's
  newest release, compacted (:mod:`dpsynth.stream.topics`), one partition per raw-events
  partition; ``--no-latest-view`` leaves it out (set ``DPSYNTH_LATEST_VIEW=false`` then);
- **state** (sensitive: raw data, the open step's records at the tree's resolution and exact
  counts; ``--state-topic``, default ``$DPSYNTH_STATE_TOPIC`` or
  ``<group id>-state`` as the worker names it): every partition's state commits, compacted,
  one partition per raw-events partition; ``--no-state-topic`` leaves it out (set
  ``DPSYNTH_CHANGELOG=false`` then);
- **dead letters** (sensitive: where raw records were rejected): one partition; every letter
  is bounded (:func:`dpsynth.stream.codecs.encode_dead_letter`), so the default size limit fits.

Replication: ``--replication-factor`` (default: 3, or the number of brokers if fewer) and
``min.insync.replicas`` = RF − 1 (at least 1): with the worker's ``acks=all`` producers, a record
acknowledged survives the loss of any one broker. Existing topics are left as they are.

.. code-block:: console

    $ dpsynth topics create --bootstrap 127.0.0.1:9092 --partitions 4
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import click

from dpsynth.cli.kafka import (
    METADATA_TIMEOUT,
    bootstrap_option,
    cluster_metadata,
    kafka_module,
    resolve_bootstrap,
)
from dpsynth.client.consumer import latest_view_topic
from dpsynth.stream.topics import latest_view_config, state_topic_config

#: A release record's largest chunk (DPSYNTH_RELEASE_MAX_RECORD_BYTES' ceiling) plus framing.
RELEASE_RECORD_OVERHEAD = 64 * 1024
DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class TopicSpec:
    """One topic to create: name, partitions and topic-level configuration."""

    role: str
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


def topic_specs(*, input_topic: str, output_topic: str, dead_letter_topic: str,
                partitions: int, output_partitions: int | None, replication: int,
                input_retention_ms: int, output_retention_ms: int,
                dead_letter_retention_ms: int, input_max_message_bytes: int,
                release_max_record_bytes: int, points_topic: str | None = None,
                output_retention_bytes: int = -1, latest_topic: str | None = None,
                state_topic: str | None = None) -> list[TopicSpec]:
    """The topics with their partitions and configuration (see the module docstring); the
    materialised points' topic, sized like the synthetic one, when ``points_topic``.

    >>> [s.partitions for s in topic_specs(input_topic="i", output_topic="o",
    ...     dead_letter_topic="d", partitions=4, output_partitions=None, replication=3,
    ...     input_retention_ms=-1, output_retention_ms=1, dead_letter_retention_ms=1,
    ...     input_max_message_bytes=1048588, release_max_record_bytes=256000,
    ...     latest_topic="o-latest", state_topic="g-state")]
    [4, 4, 1, 4, 4]
    """
    common = {"min.insync.replicas": str(max(replication - 1, 1)), "cleanup.policy": "delete"}
    release_bytes = max(release_max_record_bytes + RELEASE_RECORD_OVERHEAD, 1_048_588)
    synthetic = {**common, "retention.ms": str(output_retention_ms),
                 "retention.bytes": str(output_retention_bytes),
                 "max.message.bytes": str(release_bytes)}
    points = ([TopicSpec("materialised points", points_topic, output_partitions or partitions,
                         synthetic)] if points_topic else [])
    specs = [
        TopicSpec("raw events", input_topic, partitions, {
            **common, "retention.ms": str(input_retention_ms),
            "max.message.bytes": str(input_max_message_bytes)}),
        TopicSpec("synthetic", output_topic, output_partitions or partitions, synthetic),
        TopicSpec("dead letters", dead_letter_topic, 1, {
            **common, "retention.ms": str(dead_letter_retention_ms)}),
        *points,
    ]
    if latest_topic is not None:
        specs.append(TopicSpec("latest view", latest_topic, partitions,
                               latest_view_config(replication, release_bytes)))
    if state_topic is not None:
        specs.append(TopicSpec("state", state_topic, partitions,
                               state_topic_config(replication)))
    return specs


def _default_state_topic() -> str | None:
    """The worker's default state topic, its group id + ``-state``; None when neither the
    group id nor the run id is known here (the worker creates it at start then)."""
    group = os.environ.get("DPSYNTH_GROUP_ID") or ""
    run = os.environ.get("DPSYNTH_RUN_ID") or ""
    if not group and not run:
        return None
    return f"{group or 'dpsynth-' + run}-state"


def _env(name: str, default: str) -> Any:
    return lambda: os.environ.get(name) or default


def _points_topic() -> str | None:
    if (os.environ.get("DPSYNTH_POINTS_FORMAT") or "none").strip() == "none":
        return None
    return os.environ.get("DPSYNTH_POINTS_TOPIC") or "dpsynth-synthetic-points"


def create_specs(admin: Any, bootstrap: str, specs: list[TopicSpec], replication: int) -> list[str]:
    """Create the missing topics of ``specs``; one line per topic saying what happened."""
    kafka = kafka_module()
    metadata = cluster_metadata(admin, bootstrap)
    lines, missing = [], []
    for spec in specs:
        info = metadata.topics.get(spec.name)
        if info is not None and info.error is None and info.partitions:
            lines.append(f"{spec.role}: {spec.name} exists ({len(info.partitions)} partitions); "
                         "left as it is")
        else:
            missing.append(spec)
    if not missing:
        return lines
    futures = admin.create_topics(
        [kafka.admin.NewTopic(s.name, num_partitions=s.partitions, replication_factor=replication,
                              config=s.config) for s in missing],
        operation_timeout=METADATA_TIMEOUT)
    for spec in missing:
        try:
            futures[spec.name].result(timeout=METADATA_TIMEOUT)
        except kafka.KafkaException as e:
            error = e.args[0] if e.args else None
            if getattr(error, "code", lambda: None)() != kafka.KafkaError.TOPIC_ALREADY_EXISTS:
                raise click.ClickException(
                    f"cannot create the {spec.role} topic {spec.name}: {e}; check "
                    "--replication-factor against the number of brokers and the ACLs") from None
        lines.append(f"{spec.role}: {spec.name} created ({spec.partitions} partitions, "
                     f"replication {replication}, "
                     + ", ".join(f"{k}={v}" for k, v in sorted(spec.config.items())) + ")")
    _wait_visible(admin, [s.name for s in missing])
    return lines


def _wait_visible(admin: Any, names: list[str]) -> None:
    deadline = time.monotonic() + METADATA_TIMEOUT
    while time.monotonic() < deadline:
        topics = admin.list_topics(timeout=METADATA_TIMEOUT).topics
        if all(n in topics and topics[n].error is None and topics[n].partitions for n in names):
            return
        time.sleep(0.1)
    raise click.ClickException(f"topics {names} were created but have no metadata after "
                               f"{METADATA_TIMEOUT:g} s")


@click.command()
@bootstrap_option
@click.option("--input-topic", default=_env("DPSYNTH_INPUT_TOPIC", "dpsynth-raw-events"),
              show_default="$DPSYNTH_INPUT_TOPIC, else dpsynth-raw-events")
@click.option("--output-topic", default=_env("DPSYNTH_OUTPUT_TOPIC", "dpsynth-synthetic"),
              show_default="$DPSYNTH_OUTPUT_TOPIC, else dpsynth-synthetic")
@click.option("--dead-letter-topic",
              default=_env("DPSYNTH_DEAD_LETTER_TOPIC", "dpsynth-dead-letter"),
              show_default="$DPSYNTH_DEAD_LETTER_TOPIC, else dpsynth-dead-letter")
@click.option("--partitions", type=click.IntRange(min=1), default=1, show_default=True,
              help="Partitions of the raw-events topic: one per worker you plan to run.")
@click.option("--points-topic", default=_points_topic, show_default="$DPSYNTH_POINTS_TOPIC "
              "(else dpsynth-synthetic-points) when $DPSYNTH_POINTS_FORMAT is set, else none",
              help="Also create the topic of the materialised points (DPSYNTH_POINTS_FORMAT), "
                   "sized like the synthetic topic.")
@click.option("--output-partitions", type=click.IntRange(min=1),
              help="Partitions of the synthetic topic (default: --partitions).")
@click.option("--replication-factor", "replication", type=click.IntRange(min=1),
              help="Replicas of every partition (default: 3, or the number of brokers if "
                   "fewer); min.insync.replicas is one less (at least 1).")
@click.option("--input-retention-ms", type=int, default=-1, show_default=True,
              help="retention.ms of the raw events (-1: forever; a worker that lost its state "
                   "replays its partition from offset 0).")
@click.option("--latest-topic",
              default=lambda: os.environ.get("DPSYNTH_LATEST_TOPIC") or "",
              show_default="$DPSYNTH_LATEST_TOPIC, else OUTPUT_TOPIC-latest",
              help="The latest view's compacted topic.")
@click.option("--no-latest-view", is_flag=True,
              help="No latest view (the worker then needs DPSYNTH_LATEST_VIEW=false).")
@click.option("--state-topic", default=lambda: os.environ.get("DPSYNTH_STATE_TOPIC") or "",
              show_default="$DPSYNTH_STATE_TOPIC, else GROUP-state (GROUP: $DPSYNTH_GROUP_ID, "
              "else dpsynth-$DPSYNTH_RUN_ID)",
              help="The state topic (raw data: the open step's records at the tree's "
                   "resolution, exact counts; protect it like the raw events).")
@click.option("--no-state-topic", is_flag=True,
              help="No state topic (the worker then needs DPSYNTH_CHANGELOG=false).")
@click.option("--output-retention-ms", type=int, default=7 * DAY_MS, show_default=True,
              help="retention.ms of the synthetic topic (the history of releases; -1: "
                   "forever).")
@click.option("--output-retention-bytes", type=int, default=-1, show_default=True,
              help="retention.bytes of the synthetic topic, per partition (-1: no bound); "
                   "docs/operator.md 'Sizing the history'.")
@click.option("--dead-letter-retention-ms", type=int, default=7 * DAY_MS, show_default=True)
@click.option("--input-max-message-bytes", type=click.IntRange(min=1024), default=1_048_588,
              show_default=True, help="max.message.bytes of the raw events (Kafka's default); "
              "the worker dead-letters a message too large to decode (16 MiB), never stops.")
@click.option("--release-max-record-bytes", type=click.IntRange(min=1024, max=1_000_000),
              default=lambda: int(os.environ.get("DPSYNTH_RELEASE_MAX_RECORD_BYTES") or 256_000),
              show_default="$DPSYNTH_RELEASE_MAX_RECORD_BYTES, else 256000",
              help="The worker's largest release record (sizes the synthetic topic's limit).")
def create(bootstrap: str | None, input_topic: str, output_topic: str, dead_letter_topic: str,
           points_topic: str | None, partitions: int, output_partitions: int | None,
           replication: int | None, latest_topic: str, no_latest_view: bool,
           state_topic: str, no_state_topic: bool,
           input_retention_ms: int, output_retention_ms: int, output_retention_bytes: int,
           dead_letter_retention_ms: int, input_max_message_bytes: int,
           release_max_record_bytes: int) -> None:
    """Create the raw-events, synthetic, dead-letter and latest-view topics (the missing
    ones), and the materialised points' topic with --points-topic."""
    kafka = kafka_module()
    servers = resolve_bootstrap(bootstrap)
    admin = kafka.admin.AdminClient({"bootstrap.servers": servers})
    brokers = len(cluster_metadata(admin, servers).brokers)
    replication = replication or min(3, brokers)
    if replication > brokers:
        raise click.UsageError(f"--replication-factor {replication} exceeds the {brokers} "
                               "broker(s) of the cluster; lower it")
    specs = topic_specs(
        input_topic=input_topic, output_topic=output_topic, dead_letter_topic=dead_letter_topic,
        partitions=partitions, output_partitions=output_partitions, replication=replication,
        input_retention_ms=input_retention_ms, output_retention_ms=output_retention_ms,
        dead_letter_retention_ms=dead_letter_retention_ms,
        input_max_message_bytes=input_max_message_bytes,
        release_max_record_bytes=release_max_record_bytes, points_topic=points_topic,
        output_retention_bytes=output_retention_bytes,
        latest_topic=None if no_latest_view else latest_topic or latest_view_topic(output_topic),
        state_topic=None if no_state_topic else state_topic or _default_state_topic())
    if len({s.name for s in specs}) != len(specs):
        raise click.UsageError("the input, output, dead-letter, latest-view, state (and "
                               "points) topics must be different topics")
    for line in create_specs(admin, servers, specs, replication):
        click.echo(line)
    if not no_state_topic and not any(s.role == "state" for s in specs):
        click.echo("state: left to the worker, which creates <group id>-state at start (pass "
                   "--state-topic, or set DPSYNTH_GROUP_ID or DPSYNTH_RUN_ID, to create it here)")
