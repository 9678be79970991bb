"""What every deployment we ship sets (issue 15): static membership, probes, the CLI's topics."""

from __future__ import annotations

from pathlib import Path

import yaml

from dpsynth.stream.settings import WorkerConfig

ROOT = Path(__file__).parents[2]



def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _statefulset() -> dict:
    return yaml.safe_load((ROOT / "deploy" / "k8s" / "statefulset.yaml").read_text())


def test_the_statefulset_makes_every_pod_a_static_member_named_after_it():
    container = _statefulset()["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    names = [e["name"] for e in container["env"]]
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["DPSYNTH_GROUP_INSTANCE_ID"]["value"] == "$(POD_NAME)"
    assert names.index("POD_NAME") < names.index("DPSYNTH_GROUP_INSTANCE_ID")  # expansion order
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_compose_gives_the_worker_an_instance_id_and_creates_the_workers_topics():
    services = _compose()["services"]
    worker = services["worker"]["environment"]
    assert worker["DPSYNTH_GROUP_INSTANCE_ID"]
    command = services["kafka-init"]["command"]
    assert command[:3] == ["dpsynth", "topics", "create"]
    defaults = WorkerConfig.model_fields
    for variable, field in (("DPSYNTH_INPUT_TOPIC", "input_topic"),
                            ("DPSYNTH_OUTPUT_TOPIC", "output_topic"),
                            ("DPSYNTH_DEAD_LETTER_TOPIC", "dead_letter_topic")):
        # the worker and `dpsynth topics create`/`produce`/`consume` agree on the names
        assert worker.get(variable, defaults[field].default) == defaults[field].default


def test_the_default_instance_id_is_stable_per_data_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("POD_NAME", raising=False)
    a = WorkerConfig.model_construct(group_instance_id="", data_dir=tmp_path / "a")
    b = WorkerConfig.model_construct(group_instance_id="", data_dir=tmp_path / "b")
    assert a.instance_id() == a.instance_id() != b.instance_id()
    monkeypatch.setenv("POD_NAME", "dpsynth-worker-3")
    assert a.instance_id().startswith("dpsynth-worker-3-")
    off = WorkerConfig.model_construct(group_instance_id="off", data_dir=tmp_path)
    assert off.instance_id() == ""
    named = WorkerConfig.model_construct(group_instance_id="w-7", data_dir=tmp_path)
    assert named.instance_id() == "w-7"
