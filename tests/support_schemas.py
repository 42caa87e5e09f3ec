"""Validate manifests the way the API server would, strictly.

Kubernetes kinds: the `kubernetes-validate` package's published API schemas with strict
mode (unknown fields rejected). The DynamoGraphDeployment: the v1beta1 `openAPIV3Schema`
of the published CRD in `../shared/reference/`, read at test time (never copied here) and
made strict like a structural schema on the server: an object that lists `properties`
accepts no other field unless it says `x-kubernetes-preserve-unknown-fields`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.conftest import SHARED_DIR

CRD_FILE = "nvidia.com_dynamographdeployments.yaml"
# The newest Kubernetes API the pinned kubernetes-validate knows; fixed by the pin.
K8S_VERSION = kubernetes_validate.utils.latest_version()


def validate_k8s(manifest: dict[str, Any]) -> None:
    """Raise if the manifest is not a valid object of its kind (unknown fields included)."""
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def validate_pod_template(template: dict[str, Any]) -> None:
    """A graph component's `podTemplate` is a core PodTemplateSpec: check it as one."""
    validate_k8s(
        {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "check"},
         "template": template}
    )


def _strict(schema: Any) -> Any:
    """OpenAPI v3 structural schema -> JSON Schema that rejects unknown fields."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if out.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_path() -> Path:
    return SHARED_DIR / "reference" / CRD_FILE


@cache
def _graph_validator() -> jsonschema.Draft7Validator:
    crd = yaml.safe_load(crd_path().read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta1")
    schema = _strict(version["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


def graph_validator() -> jsonschema.Draft7Validator:
    """The v1beta1 validator; skips the calling test (with the reason) without the CRD."""
    if not crd_path().is_file():
        pytest.skip(f"{crd_path()} is absent: the published DynamoGraphDeployment CRD sits "
                    "beside the repository on dev machines and in CI")
    return _graph_validator()


def graph_errors(manifest: dict[str, Any]) -> list[str]:
    """Every schema error of a DynamoGraphDeployment manifest, as readable lines."""
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in graph_validator().iter_errors(manifest)
    ]
