"""What the Kafka commands share: the broker address, the client module, cluster metadata.

Layer: adapter (confluent-kafka, imported lazily so that ``dpsynth run`` works without it).
The broker address comes from ``--bootstrap``, else ``KAFKA_BOOTSTRAP_SERVERS``, else
``DPSYNTH_BROKER`` (the worker's setting; a Faust URL such as ``kafka://kafka:9092`` is
accepted).
"""

from __future__ import annotations

import os
from typing import Any

import click

from dpsynth.settings import bootstrap_of

#: Environment variables naming the broker, in order of precedence after ``--bootstrap``.
BOOTSTRAP_ENVS = ("KAFKA_BOOTSTRAP_SERVERS", "DPSYNTH_BROKER")
#: Seconds to wait for the broker's metadata (reachability, topic creation).
METADATA_TIMEOUT = 15.0


def resolve_bootstrap(option: str | None) -> str:
    """The bootstrap servers: ``--bootstrap``, else the environment, else a usage error.

    Faust-style lists (``kafka://a:9092;kafka://b:9092``) become ``a:9092,b:9092``.

    >>> resolve_bootstrap("kafka://k1:9092;kafka://k2:9092")
    'k1:9092,k2:9092'
    """
    value = option
    if not value:
        value = next((os.environ[v] for v in BOOTSTRAP_ENVS if os.environ.get(v, "").strip()),
                     None)
    if not value:
        raise click.UsageError(
            f"no broker: pass --bootstrap HOST:PORT or set {' or '.join(BOOTSTRAP_ENVS)} "
            "(deploy/kafka-local.sh start prints a local one)"
        )
    return bootstrap_of(value)


def kafka_module() -> Any:
    """The confluent_kafka module, or a usage error naming the extra to install."""
    try:
        import confluent_kafka
        import confluent_kafka.admin  # noqa: F401  (makes confluent_kafka.admin available)
    except ImportError:
        raise click.UsageError(
            "confluent-kafka is not installed: pip install 'dpsynth[cli,client]'"
        ) from None
    return confluent_kafka


def cluster_metadata(admin: Any, bootstrap: str) -> Any:
    kafka = kafka_module()
    try:
        return admin.list_topics(timeout=METADATA_TIMEOUT)
    except kafka.KafkaException as e:
        raise click.ClickException(
            f"cannot reach the broker at {bootstrap} within {METADATA_TIMEOUT:g} s ({e}); "
            "start one (deploy/kafka-local.sh start) or fix --bootstrap"
        ) from None


#: The broker option of ``produce`` and ``consume``.
bootstrap_option = click.option(
    "--bootstrap",
    help="Kafka bootstrap servers HOST:PORT[,…]. Default: $KAFKA_BOOTSTRAP_SERVERS, "
         "else $DPSYNTH_BROKER.",
)
