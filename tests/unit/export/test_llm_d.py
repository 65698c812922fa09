"""The llm-d export: the modelservice chart's values against the chart's own values schema (closed:
a misspelled key fails), each container against Kubernetes' Container schema, the scheduler's plugin
config against the router's types, for a GPU plan (the H100 snapshot) and a CPU plan; and the CPU
tier's capacity handed to the scheduler from the plan."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from kvstack.errors import UnsupportedError
from kvstack.export import ExportOptions, export_plan
from kvstack.export.llm_d import BLOCK_SIZE_TOKENS, EPP_FILE
from kvstack.export.secrets import HASH_SEED
from kvstack.planning.schema import Plan
from tests.support.k8s_schema import crd_schema, errors, k8s_schema, written_schema
from tests.unit.export.plans import make_plan
from tests.unit.planning.helpers import plan_for, roomy_cpu_host

VALUES, VALUES_SOURCE = crd_schema("llm-d-modelservice-values", force=True)  # the chart ignores others
EPP, _ = written_schema("llm-d-endpointpickerconfig")
CHART_ONLY = ("modelCommand", "mountModelVolume")  # container keys the chart reads, not Kubernetes

PLANS = {
    "h100-native": lambda: plan_for("h100-sxm", "llama-3.1-8b", offload="native", context=131072, users=8),
    "h100-lmcache": lambda: plan_for("h100-sxm", "llama-3.1-8b", offload="lmcache", context=131072, users=8),
    "h100-none": lambda: plan_for("h100-sxm", "llama-3.1-8b", offload="none"),
    "cpu-lmcache-mp": lambda: plan_for(
        roomy_cpu_host(), "llama-3.1-8b", None, context=4096, offload="lmcache-mp"
    ),
}


def container_schema() -> dict[str, Any]:
    deployment = k8s_schema("Deployment")
    spec = deployment["properties"]["spec"]["properties"]["template"]["properties"]["spec"]
    return spec["properties"]["containers"]["items"]  # type: ignore[no-any-return]


def rendered(plan: Plan, **options: Any) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    bundle = export_plan("llm-d", plan, ExportOptions(**options))
    (epp,) = [f for f in bundle.files if f.name == EPP_FILE]
    return yaml.safe_load(bundle.main.content), yaml.safe_load(epp.content), bundle.notes


def test_the_schemas_are_the_charts_and_the_routers() -> None:
    assert (
        VALUES_SOURCE["repo"] == "llm-d-incubation/llm-d-modelservice"
        and VALUES_SOURCE["version"] == "v0.4.12"
    )
    assert "decode" in VALUES["properties"] and VALUES["additionalProperties"] is False  # closed here


@pytest.mark.parametrize("case", sorted(PLANS))
def test_values_containers_and_scheduler_config_validate(case: str) -> None:
    values, epp, _ = rendered(PLANS[case]())
    assert errors(values, VALUES) == []
    for container in values["decode"]["containers"]:
        assert all(isinstance(a, str) for a in container["args"])  # the chart's schema leaves items open
        k8s = {k: v for k, v in container.items() if k not in CHART_ONLY}
        assert errors(k8s, container_schema()) == [], case
    assert errors(epp, EPP) == []


def test_misspelled_keys_fail() -> None:
    values, epp, _ = rendered(PLANS["h100-native"]())
    bad = copy.deepcopy(values)
    bad["decode"]["replica"] = 1
    assert any("replica" in e for e in errors(bad, VALUES))
    bad = copy.deepcopy(values)
    bad["modelArtifact"] = bad.pop("modelArtifacts")
    assert errors(bad, VALUES)
    container = {k: v for k, v in values["decode"]["containers"][0].items() if k not in CHART_ONLY}
    assert errors({**container, "imagee": "x"}, container_schema())
    bad_epp = copy.deepcopy(epp)
    producer = next(p for p in bad_epp["plugins"] if p.get("name") == "cpu-prefix-cache-producer")
    producer["parameters"]["lruCapacityPerSever"] = 1
    assert errors(bad_epp, EPP)


def test_the_scheduler_gets_the_cpu_tiers_capacity_from_the_plan() -> None:
    plan = PLANS["h100-native"]()
    cpu = plan.tier("cpu")
    assert cpu is not None
    _, epp, _ = rendered(plan)
    producer = next(p for p in epp["plugins"] if p.get("name") == "cpu-prefix-cache-producer")
    params = producer["parameters"]
    assert params == {
        "autoTune": False,
        "blockSizeTokens": BLOCK_SIZE_TOKENS,
        "lruCapacityPerServer": cpu.tokens // BLOCK_SIZE_TOKENS,
    }
    refs = [p["pluginRef"] for p in epp["schedulingProfiles"][0]["plugins"]]
    assert "cpu-prefix-cache-scorer" in refs and "gpu-prefix-cache-scorer" in refs
    _, none_epp, _ = rendered(PLANS["h100-none"]())
    assert not any(p.get("name") == "cpu-prefix-cache-producer" for p in none_epp["plugins"])


def test_the_native_tiers_and_the_hash_seed_reach_vllm() -> None:
    plan = PLANS["h100-native"]()
    values, _, _ = rendered(plan)
    (container,) = values["decode"]["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["PYTHONHASHSEED"] == HASH_SEED
    args = container["args"]
    cpu = plan.tier("cpu")
    assert cpu is not None
    if "--kv-transfer-config" in args:
        cfg = json.loads(args[args.index("--kv-transfer-config") + 1])
        assert cfg["kv_connector"] == "OffloadingConnector"
        assert cfg["kv_connector_extra_config"]["cpu_bytes_to_use"] == cpu.size_bytes
    else:
        assert args[args.index("--kv-offloading-backend") + 1] == "native"
    assert values["decode"]["parallelism"]["tensor"] == plan.parallel.tensor_parallel_size


def test_an_lmcache_mp_plan_says_it_runs_in_process_and_keeps_secrets_out() -> None:
    _, _, notes = rendered(PLANS["cpu-lmcache-mp"]())
    assert any("runs no LMCache server" in n for n in notes)
    plan = make_plan(connector="lmcache", remote_gib=50, remote_url="redis://:pw-llmd-1@redis:6379")
    bundle = export_plan("llm-d", plan, ExportOptions(remote_url="redis://:pw-llmd-1@redis:6379"))
    assert "pw-llmd-1" not in bundle.main.content
    (secret,) = [f for f in bundle.files if f.secret]
    assert errors(yaml.safe_load(secret.content), k8s_schema("Secret")) == []


def test_sglang_is_refused() -> None:
    with pytest.raises(UnsupportedError, match="runs vLLM"):
        export_plan("llm-d", make_plan(engine="sglang", connector="hicache"), ExportOptions())
