"""Rendered Kubernetes objects checked against the schemas their platforms publish, strictly.

The schemas live in tests/unit/export/data/schemas/ with their origin beside them (``source``, or
k8s/SOURCE.md). A CRD's openAPIV3Schema leaves objects open (the API server prunes unknown fields
rather than rejecting them); here every object that lists its properties is closed, unless the
schema says it keeps unknown fields (``x-kubernetes-preserve-unknown-fields``) or says what extra
keys may hold (``additionalProperties``), as ``kubectl apply --validate=strict`` would reject a
misspelled field. ``int-or-string`` takes both.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema

SCHEMAS = Path(__file__).resolve().parents[1] / "unit" / "export" / "data" / "schemas"


def closed(schema: Any, force: bool = False) -> Any:
    """A copy of ``schema`` with every object that lists properties closed to others; ``force`` closes
    also those that say ``additionalProperties: true`` (a chart's values schema: every key written
    must be one the chart declares, since it ignores the others)."""
    out = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("x-kubernetes-int-or-string"):
                node.pop("type", None)
                node.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
            if (
                "properties" in node
                and ("additionalProperties" not in node or (force and node["additionalProperties"] is True))
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    return out


def crd_schema(name: str, force: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the closed schema, its source) of ``schemas/<name>.json``."""
    doc = json.loads((SCHEMAS / f"{name}.json").read_text(encoding="utf-8"))
    return closed(doc["schema"], force), doc["source"]


def written_schema(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the schema as written, its source): one that says itself where it is closed."""
    doc = json.loads((SCHEMAS / f"{name}.json").read_text(encoding="utf-8"))
    return doc["schema"], doc["source"]


def k8s_schema(kind: str) -> dict[str, Any]:
    """Kubernetes' own strict schema of a core kind (schemas/k8s/<kind>.json)."""
    return json.loads((SCHEMAS / "k8s" / f"{kind.lower()}.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def errors(obj: Any, schema: dict[str, Any]) -> list[str]:
    """Every violation of ``schema`` by ``obj``, as "path: message" lines (empty: valid).

    Draft 7 where the schema says so (the llm-d chart's), else Draft 4: OpenAPI v3's schema objects
    (the CRDs') are a Draft 4 subset, and the Kubernetes schemas say only ``json-schema.org/schema#``."""
    draft7 = "draft-07" in str(schema.get("$schema", ""))
    cls = jsonschema.Draft7Validator if draft7 else jsonschema.Draft4Validator
    found = sorted(cls(schema).iter_errors(obj), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '.'}: {e.message}" for e in found]
