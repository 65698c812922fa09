"""The KServe export: every object validated against the schema its platform publishes (the
LLMInferenceService CRD of KServe 0.20.0, Kubernetes' own for the ConfigMap and the Secret), for a
GPU plan (the H100 snapshot) and a CPU plan, and the plan's tiers where KServe reads them."""

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

PASSWORD = "kserve-secret-pw"
SCHEMA, SOURCE = crd_schema("kserve-llminferenceservice")


def objects(plan: Plan, **options: Any) -> list[dict[str, Any]]:
    bundle = export_plan("kserve", plan, ExportOptions(**options))
    docs = []
    for f in bundle.files:
        docs += [d for d in yaml.safe_load_all(f.content) if d]
    return docs


def service(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (svc,) = [d for d in docs if d["kind"] == "LLMInferenceService"]
    return svc


def main_container(svc: dict[str, Any]) -> dict[str, Any]:
    (main,) = svc["spec"]["template"]["containers"]
    assert main["name"] == "main"
    return main  # type: ignore[no-any-return]


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


PLANS = {
    "h100-native": lambda: plan_for("h100-sxm", "llama-3.1-8b", offload="native", context=131072, users=8),
    "h100-lmcache": lambda: plan_for("h100-sxm", "llama-3.1-8b", offload="lmcache", context=131072, users=8),
    "cpu-lmcache-mp": lambda: plan_for(
        roomy_cpu_host(), "llama-3.1-8b", None, context=4096, offload="lmcache-mp"
    ),
    "cpu-native-remote": lambda: make_plan(connector="lmcache", remote_gib=50, remote_url="redis://r:6379"),
}


def test_the_schema_is_kserves_crd() -> None:
    assert SOURCE["repo"] == "kserve/kserve" and SOURCE["api_version"] == "serving.kserve.io/v1alpha2"
    assert "kvCacheOffloading" in SCHEMA["properties"]["spec"]["properties"]


@pytest.mark.parametrize("case", sorted(PLANS))
def test_every_object_validates_against_its_schema(case: str) -> None:
    for doc in objects(PLANS[case]()):
        schema = SCHEMA if doc["kind"] == "LLMInferenceService" else k8s_schema(doc["kind"])
        assert errors(doc, schema) == [], (case, doc["kind"])


def test_a_misspelled_field_fails_the_schema() -> None:
    svc = service(objects(PLANS["h100-native"]()))
    for path in (("spec", "kvCacheOffloading"), ("spec", "template", "containers", 0)):
        bad = copy.deepcopy(svc)
        node: Any = bad
        for key in path:
            node = node[key]
        node["evictionPolicyy" if "kvCacheOffloading" in path else "imagee"] = "x"
        assert errors(bad, SCHEMA), path
    bad = copy.deepcopy(svc)
    bad["spec"]["workload"] = {"kvCacheOffloading": svc["spec"]["kvCacheOffloading"]}  # the docs' path
    assert any("workload" in e for e in errors(bad, SCHEMA))


def test_a_native_plan_goes_into_kvcacheoffloading_with_its_sizes() -> None:
    plan = PLANS["h100-native"]()
    cpu, disk = plan.tier("cpu"), plan.tier("disk")
    assert cpu is not None
    svc = service(objects(plan))
    off = svc["spec"]["kvCacheOffloading"]
    assert off["cpu"] == f"{cpu.size_bytes // GIB}Gi" and off["evictionPolicy"] == "lru"
    if disk is not None:
        assert off["secondary"] == [{"fileSystem": {"emptyDir": {"size": f"{disk.size_bytes // GIB}Gi"}}}]
    main = main_container(svc)
    assert "--kv-transfer-config" not in main["args"]  # KServe's controller adds the OffloadingConnector
    assert main["args"][main["args"].index("--kv-cache-dtype") + 1] == plan.cache.kv_cache_dtype
    assert env(main)["PYTHONHASHSEED"] == HASH_SEED
    assert env(main)["VLLM_API_KEY"] == {
        "secretKeyRef": {"name": svc["metadata"]["name"] + "-api-key", "key": "api-key"}
    }
    assert main["resources"]["limits"]["nvidia.com/gpu"] == str(plan.parallel.tensor_parallel_size)


def test_an_lmcache_plan_runs_lmcache_in_the_engine_and_says_so() -> None:
    plan = make_plan(connector="lmcache", remote_gib=50, remote_url=f"redis://:{PASSWORD}@redis:6379")
    bundle = export_plan("kserve", plan, ExportOptions(remote_url=f"redis://:{PASSWORD}@redis:6379"))
    svc = service(list(yaml.safe_load_all(bundle.main.content)))
    assert "kvCacheOffloading" not in svc["spec"]
    main = main_container(svc)
    e = env(main)
    assert e["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "96" and e["LMCACHE_MAX_LOCAL_DISK_SIZE"] == "700"
    assert e["LMCACHE_REMOTE_URL"] == {
        "secretKeyRef": {"name": svc["metadata"]["name"] + "-redis", "key": "url"}
    }
    assert PASSWORD not in bundle.main.content
    (secret,) = [f for f in bundle.files if f.secret]
    assert secret.mode == 0o600 and PASSWORD in secret.content
    assert errors(yaml.safe_load(secret.content), k8s_schema("Secret")) == []
    assert any("only vLLM's OffloadingConnector" in n for n in bundle.notes)


def test_what_kserve_cannot_carry_is_said() -> None:
    notes = export_plan("kserve", PLANS["cpu-lmcache-mp"](), ExportOptions()).notes
    assert any("runs no LMCache server" in n for n in notes)
    assert any("canary is not exported" in n for n in notes)


def test_sglang_is_refused() -> None:
    with pytest.raises(UnsupportedError, match="runs vLLM"):
        export_plan("kserve", make_plan(engine="sglang", connector="hicache"), ExportOptions())
