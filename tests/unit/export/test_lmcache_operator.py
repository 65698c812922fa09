"""The LMCache-operator export: the LMCacheEngine against the operator's CRD (LMCache/LMCache
operator/, closed: a misspelled field fails), the vLLM Deployment and Service and the Secrets against
Kubernetes' own schemas, for GPU plans (the H100 snapshot) and a CPU plan; the plan's sizes where
the operator reads them, the webhook's wiring, and what it cannot carry said."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from kvstack.errors import UnsupportedError
from kvstack.export import ExportOptions, export_plan
from kvstack.export.secrets import HASH_SEED
from kvstack.planning.schema import Plan
from kvstack.units import GIB
from tests.support.k8s_schema import crd_schema, errors, k8s_schema
from tests.unit.export.plans import make_plan
from tests.unit.planning.helpers import plan_for, roomy_cpu_host

SCHEMA, SOURCE = crd_schema("lmcache-operator-lmcacheengine")
PASSWORD = "op-redis-pw-9"

PLANS = {
    "h100-lmcache-mp": lambda: plan_for(
        "h100-sxm", "llama-3.1-8b", offload="lmcache-mp", context=131072, users=8
    ),
    "h100-lmcache": lambda: plan_for("h100-sxm", "llama-3.1-8b", offload="lmcache", context=131072, users=8),
    "tp2-remote": lambda: make_plan(connector="lmcache-mp", remote_gib=50, remote_url="redis://redis:6379"),
    "cpu-lmcache-mp": lambda: plan_for(
        roomy_cpu_host(), "llama-3.1-8b", None, context=4096, offload="lmcache-mp"
    ),
}


def docs(plan: Plan, **options: Any) -> tuple[list[dict[str, Any]], list[str]]:
    bundle = export_plan("lmcache-operator", plan, ExportOptions(**options))
    out = []
    for f in bundle.files:
        out += [d for d in yaml.safe_load_all(f.content) if d]
    return out, bundle.notes


def engine_of(found: list[dict[str, Any]]) -> dict[str, Any]:
    (engine,) = [d for d in found if d["kind"] == "LMCacheEngine"]
    return engine


def test_the_schema_is_the_operators_crd() -> None:
    assert SOURCE["repo"] == "LMCache/LMCache" and SOURCE["api_version"] == "lmcache.lmcache.ai/v1alpha1"
    assert "l1" in SCHEMA["properties"]["spec"]["properties"]


@pytest.mark.parametrize("case", sorted(PLANS))
def test_every_object_validates_against_its_schema(case: str) -> None:
    found, _ = docs(PLANS[case](), remote_url=f"redis://:{PASSWORD}@redis:6379" if "remote" in case else None)
    assert {d["kind"] for d in found} >= {"LMCacheEngine", "Deployment", "Service", "ConfigMap"}
    for doc in found:
        schema = SCHEMA if doc["kind"] == "LMCacheEngine" else k8s_schema(doc["kind"])
        assert errors(doc, schema) == [], (case, doc["kind"])


def test_a_misspelled_field_fails_the_schema() -> None:
    engine = engine_of(docs(PLANS["h100-lmcache-mp"]())[0])
    bad = copy.deepcopy(engine)
    bad["spec"]["server"]["chunkSise"] = 256
    assert any("chunkSise" in e for e in errors(bad, SCHEMA))
    bad = copy.deepcopy(engine)
    bad["spec"]["l1"]["sizeGB"] = 0  # the operator requires more than 0
    assert errors(bad, SCHEMA)


def test_the_plans_sizes_and_the_webhooks_wiring() -> None:
    plan = PLANS["h100-lmcache-mp"]()
    cpu, disk = plan.tier("cpu"), plan.tier("disk")
    assert cpu is not None
    found, notes = docs(plan)
    spec = engine_of(found)["spec"]
    assert spec["l1"]["sizeGB"] == cpu.size_bytes // GIB
    assert (
        spec["server"]["chunkSize"] == plan.cache.chunk_size
        and spec["server"]["hashAlgorithm"] == "sha256_cbor"
    )
    assert {"name": "PYTHONHASHSEED", "value": HASH_SEED} in spec["env"]
    if disk is not None:
        raw = spec["l2Backend"]["raw"]
        assert raw["type"] == "fs_native" and raw["config"]["max_capacity_gb"] == disk.size_bytes // GIB
    (deployment,) = [d for d in found if d["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"]["lmcache.ai/lmcache-inject"] == "true"
    assert (
        template["metadata"]["annotations"]["lmcache.ai/lmcache-engine"]
        == engine_of(found)["metadata"]["name"]
    )
    (container,) = template["spec"]["containers"]
    assert "command" not in container and "--kv-transfer-config" not in container["args"]  # the webhook's
    assert any("canary is not exported" in n for n in notes)


def test_a_redis_tier_takes_its_password_from_a_secret_and_the_disk_tier_is_said_dropped() -> None:
    plan = PLANS["tp2-remote"]()
    url = f"redis://:{PASSWORD}@redis:6379"
    bundle = export_plan("lmcache-operator", plan, ExportOptions(remote_url=url))
    assert PASSWORD not in bundle.main.content and PASSWORD not in "".join(bundle.notes)
    resp = engine_of(list(yaml.safe_load_all(bundle.main.content)))["spec"]["l2Backend"]["resp"]
    assert resp["host"] == "redis" and resp["port"] == 6379 and resp["maxCapacityGB"] == 50
    (secret,) = [f for f in bundle.files if f.secret]
    doc = yaml.safe_load(secret.content)
    assert (
        doc["metadata"]["name"] == resp["authSecretRef"]["name"] and doc["stringData"]["password"] == PASSWORD
    )
    assert secret.mode == 0o600
    assert any("disk tier is not carried" in n for n in bundle.notes)


def test_a_cpu_plan_runs_on_any_node_without_a_gpu() -> None:
    found, notes = docs(PLANS["cpu-lmcache-mp"]())
    spec = engine_of(found)["spec"]
    assert spec["nodeSelector"] == {} and spec["runtimeClassName"] == ""
    (deployment,) = [d for d in found if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in str(container["resources"])
    assert any("CPU build of vLLM" in n for n in notes)


@pytest.mark.parametrize(
    ("plan", "match"),
    [
        (lambda: make_plan(connector="native"), "connector 'native'"),
        (lambda: make_plan(engine="sglang", connector="lmcache-mp"), "sglang"),
    ],
)
def test_what_the_operator_cannot_run_is_refused(plan: Any, match: str) -> None:
    with pytest.raises(UnsupportedError, match=match):
        export_plan("lmcache-operator", plan(), ExportOptions())
