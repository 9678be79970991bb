"""The Kubernetes manifests (deploy/k8s) as a cluster would receive them: rendered, then checked
strictly against the Kubernetes schemas, offline (kubernetes-validate's bundled schemas)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.support.manifests import (
    KUBERNETES_VERSIONS,
    KustomizeError,
    render_kustomization,
    schema_errors,
)

K8S = Path(__file__).parents[2] / "deploy" / "k8s"


@pytest.fixture(scope="module")
def rendered() -> list[dict]:
    return render_kustomization(K8S)


def _statefulset(objects: list[dict]) -> dict:
    return copy.deepcopy(next(o for o in objects if o["kind"] == "StatefulSet"))


def test_the_kustomization_renders_every_resource_labelled_with_the_images_tag(rendered):
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in rendered)
    assert kinds == [("ConfigMap", "dpsynth-config"), ("ConfigMap", "dpsynth-schema"),
                     ("PodDisruptionBudget", "dpsynth-worker"), ("Service", "dpsynth-worker"),
                     ("StatefulSet", "dpsynth-worker")]
    for obj in rendered:
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "dpsynth"
    container = _statefulset(rendered)["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "dpsynth:0.1.0"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_rendered_object_is_valid_against_the_strict_kubernetes_schema(rendered, version):
    errors = [e for obj in rendered for e in schema_errors(obj, version)]
    assert errors == []


@pytest.mark.parametrize(("where", "field"), [
    ("spec.template.spec", "terminationGracePeriodSeconds"),
    ("spec.template.spec.containers.0", "imagePullPolicy"),
    ("spec.template.spec.containers.0.readinessProbe.httpGet", "path"),
])
def test_a_misspelt_field_fails_the_check(rendered, where, field):
    statefulset = _statefulset(rendered)
    node = statefulset
    for step in where.split("."):
        node = node[int(step)] if step.isdigit() else node[step]
    node[field[:-1]] = node.pop(field)  # the last letter dropped
    errors = schema_errors(statefulset, "latest")
    assert len(errors) == 1 and f"'{field[:-1]}' was unexpected" in errors[0], errors


def test_a_kind_without_a_schema_is_an_error():
    assert schema_errors({"apiVersion": "apps/v1", "kind": "StatefulSett",
                          "metadata": {"name": "x"}}, "latest")


def test_the_renderer_refuses_what_it_does_not_implement(tmp_path):
    (tmp_path / "kustomization.yaml").write_text("resources: []\npatches: []\n")
    with pytest.raises(KustomizeError, match="patches"):
        render_kustomization(tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "labels:\n  - pairs: {a: b}\n    includeSelectors: true\n")
    with pytest.raises(KustomizeError, match="includeSelectors"):
        render_kustomization(tmp_path)
