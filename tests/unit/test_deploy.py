"""What every deployment we ship sets (issue 15): static membership, probes, the CLI's topics;
every DPSYNTH_* variable a setting of the worker; a compose worker that scales (issue 29)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dpsynth.stream.settings import WorkerConfig
from tests.support.manifests import (
    compose_variables,
    manifest_variables,
    render_kustomization,
    setting_variables,
)

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


def test_compose_creates_the_workers_topics():
    services = _compose()["services"]
    worker = services["worker"]["environment"]
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


def _undeclared(variables: dict[str, str]) -> dict[str, str]:
    known = setting_variables(WorkerConfig)
    return {name: where for name, where in variables.items() if name not in known}


def test_every_dpsynth_variable_of_compose_and_kubernetes_is_a_worker_setting():
    compose = compose_variables(_compose())
    k8s = manifest_variables(render_kustomization(ROOT / "deploy" / "k8s"))
    assert "DPSYNTH_EPSILON" in compose and "DPSYNTH_GROUP_INSTANCE_ID" in k8s  # both read
    assert _undeclared({**compose, **k8s}) == {}
    # a misspelt one is named with where it is set
    assert _undeclared({"DPSYNTH_EPSILLON": "here", "DPSYNTH_EPSILON": "there"}) == {
        "DPSYNTH_EPSILLON": "here"}


def _fixed_host_port(port: str | int | dict) -> str:
    """The host port a compose port entry pins ("" when the engine picks one)."""
    if isinstance(port, dict):
        return str(port.get("published", ""))
    parts = str(port).split(":")  # [[ip:]host:]container
    return parts[-2] if len(parts) > 1 else ""


@pytest.mark.parametrize(("entry", "pinned"), [
    ("127.0.0.1:6066:6066", "6066"), ("6066:6066", "6066"), ("127.0.0.1::6066", ""),
    ("6066", ""), ({"target": 6066}, ""), ({"target": 6066, "published": 6066}, "6066"),
])
def test_fixed_host_ports_are_recognised(entry, pinned):
    assert _fixed_host_port(entry) == pinned


def test_the_compose_worker_scales_to_replicas_with_their_own_id_port_and_volume(
        tmp_path, monkeypatch):
    compose = _compose()
    worker = compose["services"]["worker"]
    # `docker compose up --scale worker=2`: nothing two replicas would share or collide on
    assert "container_name" not in worker
    assert "DPSYNTH_GROUP_INSTANCE_ID" not in worker["environment"]
    assert [p for p in worker.get("ports", []) if _fixed_host_port(p)] == []
    # state: the image's VOLUME, one per container (compose would share a declared one, and
    # podman-compose an anonymous one, between the replicas)
    data_dir = worker["environment"]["DPSYNTH_DATA_DIR"]
    assert f'VOLUME ["{data_dir}"]' in (ROOT / "deploy" / "Dockerfile").read_text()
    targets = [v.get("target") if isinstance(v, dict) else str(v).split(":")[-1]
               for v in worker.get("volumes", [])]
    assert data_dir not in targets
    # replicas derive distinct static member ids from their host names (container ids), each
    # stable across its own restarts
    monkeypatch.delenv("POD_NAME", raising=False)
    config = WorkerConfig.model_construct(group_instance_id="", data_dir=Path(data_dir))
    ids = []
    for host in ("3f2a9c1b7d4e", "8e1d0b6a2c5f", "3f2a9c1b7d4e"):
        monkeypatch.setattr("socket.gethostname", lambda host=host: host)
        ids.append(config.instance_id())
    assert ids[0] == ids[2] != ids[1]


def test_the_build_context_leaves_out_environments_broker_data_outputs_and_git():
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".venv", ".venv-*", ".kafka", "build", "dist", "dpsynth-out", ".git",
            ".secrets"} <= ignored
