"""The shipped deployment files as objects: the kustomization rendered, the variables they set.

Our own tests' kit (not shipped). :func:`render_kustomization` does what ``kubectl kustomize``
does for the features deploy/k8s uses (resources, labels, images, namespace) and refuses every
other kustomization field, so that a manifest change it cannot render fails the tests instead
of being checked half-rendered. :func:`schema_errors` validates one object strictly (unknown
fields are errors) against the Kubernetes schemas bundled with ``kubernetes-validate``, offline.
:func:`setting_variables` lists the ``DPSYNTH_*`` variables a settings model reads, from its
fields' aliases, so the check follows the model wherever its declarations move.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

#: The Kubernetes versions the manifests are validated against: the oldest we document as
#: supported (persistentVolumeClaimRetentionPolicy is GA from 1.32) and the newest bundled.
KUBERNETES_VERSIONS = ("1.32", "latest")
#: The kustomization fields render_kustomization implements.
SUPPORTED = {"apiVersion", "kind", "resources", "labels", "images", "namespace"}


class KustomizeError(ValueError):
    """A kustomization this renderer does not implement, or a broken one."""


def render_kustomization(directory: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize directory`` prints, in resource order."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - SUPPORTED
    if unknown:
        raise KustomizeError(f"{directory}: kustomization fields not implemented: "
                             f"{sorted(unknown)} (tests/support/manifests.py)")
    objects: list[dict[str, Any]] = []
    for resource in kustomization.get("resources", []):
        path = directory / resource
        if path.is_dir():
            objects += render_kustomization(path)
        else:
            objects += [o for o in yaml.safe_load_all(path.read_text()) if o]
    objects = copy.deepcopy(objects)
    for label in kustomization.get("labels", []):
        _add_labels(objects, label)
    for image in kustomization.get("images", []):
        _set_image(objects, image)
    if "namespace" in kustomization:
        for obj in objects:
            obj.setdefault("metadata", {})["namespace"] = kustomization["namespace"]
    return objects


def _add_labels(objects: list[dict[str, Any]], label: dict[str, Any]) -> None:
    """``labels:`` with neither selectors nor templates (kustomize's defaults): metadata only."""
    options = set(label) - {"pairs"}
    if any(label.get(o) for o in options):
        raise KustomizeError(f"labels options not implemented: {sorted(options)}")
    for obj in objects:
        obj.setdefault("metadata", {}).setdefault("labels", {}).update(label["pairs"])


def _containers(node: Any) -> Iterator[dict[str, Any]]:
    """Every container and init container anywhere in ``node`` (pod specs at any depth)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                yield from (c for c in value if isinstance(c, dict))
            else:
                yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)


def _set_image(objects: list[dict[str, Any]], image: dict[str, str]) -> None:
    """``images:``: containers whose image is ``name`` (any tag) get newName/newTag/digest."""
    unknown = set(image) - {"name", "newName", "newTag", "digest"}
    if unknown:
        raise KustomizeError(f"images fields not implemented: {sorted(unknown)}")
    for container in _containers(objects):
        reference = container.get("image", "")
        name = reference.split("@")[0]
        if ":" in name.rsplit("/", 1)[-1]:
            name = name.rsplit(":", 1)[0]
        if name != image["name"]:
            continue
        new = image.get("newName", name)
        if "digest" in image:
            container["image"] = f"{new}@{image['digest']}"
        elif "newTag" in image:
            container["image"] = f"{new}:{image['newTag']}"
        else:
            container["image"] = new + reference[len(name):]


def schema_errors(obj: dict[str, Any], version: str) -> list[str]:
    """Where ``obj`` breaks the strict schema of its kind in Kubernetes ``version``
    ("latest": the newest bundled); empty when valid. A kind without a schema is an error."""
    import kubernetes_validate
    from kubernetes_validate import utils

    if version == "latest":
        version = utils.latest_version()
    name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except utils.ValidationError as e:
        where = ".".join(str(p) for p in e.path)
        return [f"{name} (Kubernetes {e.version}): {where}: {e.message}"]
    except utils.SchemaNotFoundError as e:
        return [f"{name}: {e.message}"]
    return []


def setting_variables(model: Any) -> set[str]:
    """Every environment variable ``model`` (a pydantic settings class) reads: each field's
    alias, or all the choices of its validation alias (old names still read)."""
    out: set[str] = set()
    for field in model.model_fields.values():
        alias = field.validation_alias
        choices = getattr(alias, "choices", None)
        if choices is not None:
            out.update(str(c) for c in choices)
        elif alias or field.alias:
            out.add(str(alias or field.alias))
    return out


def compose_variables(compose: dict[str, Any]) -> dict[str, str]:
    """``DPSYNTH_*`` variables the compose file's services set → where (service)."""
    out = {}
    for service, spec in compose.get("services", {}).items():
        environment = spec.get("environment") or {}
        if isinstance(environment, list):  # ["NAME=value", ...]
            environment = dict(e.split("=", 1) if "=" in e else (e, "") for e in environment)
        out.update({k: f"docker-compose.yml services.{service}" for k in environment
                    if k.startswith("DPSYNTH_")})
    return out


def manifest_variables(objects: list[dict[str, Any]]) -> dict[str, str]:
    """``DPSYNTH_*`` variables rendered Kubernetes objects set → where: ConfigMap keys (used
    with envFrom) and containers' env."""
    out = {}
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "ConfigMap":
            out.update({k: name for k in obj.get("data", {}) if k.startswith("DPSYNTH_")})
        for container in _containers(obj):
            out.update({e["name"]: f"{name} container {container['name']}"
                        for e in container.get("env", []) if e["name"].startswith("DPSYNTH_")})
    return out
