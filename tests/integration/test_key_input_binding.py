"""P13 on a real broker: the worker's key is bound to its input topic (no worker started).

The check the worker runs at start (``dpsynth.cli.worker.bind_input``): the input topic's
name, id and first offsets are read from the broker and recorded under the key; the same topic
passes again, a topic deleted and created anew under the same name (another id) is refused.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from dpsynth.cli.worker import bind_input
from dpsynth.errors import ConfigError
from dpsynth.stream.settings import load_config
from dpsynth.testing.kafka import create_topics, unique_topics, worker_env, write_schema

ck = pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.kafka


def _recreate(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # a hang guard: deletion completes asynchronously
        try:
            create_topics(bootstrap, {topic: 2})
            return
        except Exception:  # noqa: BLE001 - "marked for deletion": try again
            time.sleep(0.5)
    raise AssertionError(f"{topic} could not be created again")


def test_P13_the_worker_refuses_its_key_over_a_topic_created_anew(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    topics = unique_topics(f"bind-{uuid.uuid4().hex[:6]}")
    create_topics(kafka_bootstrap, {topics.input: 2})
    env = worker_env(kafka_bootstrap, topics, write_schema(tmp_path / "schema.json"),
                     tmp_path / "data")
    config = load_config(env)
    bind_input(config)
    bind_input(config)  # a restart of the same run over the same topic
    record = next(Path(env["DPSYNTH_STATE_DIR"]).glob("keys/*.json")).read_text()
    assert topics.input in record and '"0": 0' in record and '"1": 0' in record
    _recreate(kafka_bootstrap, topics.input)
    with pytest.raises(ConfigError, match="created anew") as refused:
        bind_input(config)
    assert "new key" in str(refused.value)
