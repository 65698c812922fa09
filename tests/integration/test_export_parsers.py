"""Exported engine commands through vLLM's own argument parser, exported LMCache configs through
LMCache's own loader (tests/integration/engine_probe.py, run by the interpreter that has them)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kvstack.export import ExportOptions, export_plan
from kvstack.planning.schema import Plan
from tests.support.deps import require_engine_module
from tests.support.engine_probe import run_probe
from tests.unit.export.plans import make_plan

pytestmark = pytest.mark.integration


PLANS = {
    "lmcache-cpu-disk": make_plan(tp=1),
    "lmcache-remote": make_plan(tp=1, disk_gib_per_rank=None, remote_gib=8),
    "native-cpu": make_plan(tp=1, connector="native", disk_gib_per_rank=None),
    "native-cpu-disk": make_plan(tp=1, connector="native"),
    "none": make_plan(tp=1, connector="none", cpu_gib_per_rank=None, disk_gib_per_rank=None),
}


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    py = require_engine_module("vllm")
    require_engine_module("lmcache")
    tmp = tmp_path_factory.mktemp("export-probe")
    job: dict[str, dict[str, Any]] = {"vllm_argv": {}, "lmcache_yaml": {}}
    for name, plan in PLANS.items():
        remote = "redis://:pw-1234@10.0.0.5:6379" if plan.tier("remote") else None
        bundle = export_plan("compose", plan, ExportOptions(remote_url=remote))
        doc = yaml.safe_load(bundle.main.content)
        job["vllm_argv"][f"compose-{name}"] = doc["services"]["vllm"]["command"]  # after `vllm serve`
        helm = yaml.safe_load(export_plan("helm", plan, ExportOptions(remote_url=remote)).main.content)
        vc = helm["servingEngineSpec"]["modelSpec"][0]["vllmConfig"]
        # The flags the chart's template builds from vllmConfig, then extraArgs (deployment-vllm-multi.yaml).
        job["vllm_argv"][f"helm-{name}"] = [
            plan.model.path,
            "--max-model-len", str(vc["maxModelLen"]),
            "--dtype", vc["dtype"],
            "--tensor-parallel-size", str(vc["tensorParallelSize"]),
            "--gpu_memory_utilization", str(vc["gpuMemoryUtilization"]),
            "--enable-prefix-caching",
            *vc["extraArgs"],
        ]  # fmt: skip
        for f in bundle.files:
            if f.name == "lmcache.yaml":
                path = tmp / f"{name}.yaml"
                path.write_text(f.content, encoding="utf-8")
                job["lmcache_yaml"][name] = str(path)
    result = run_probe(py, job, tmp, 600)
    return result


def probed_argv(plan: Plan, fmt: str) -> list[str]:
    doc = yaml.safe_load(export_plan(fmt, plan, ExportOptions()).main.content)
    if fmt == "compose":
        argv: list[str] = doc["services"]["vllm"]["command"]
        return argv
    extra: list[str] = doc["servingEngineSpec"]["modelSpec"][0]["vllmConfig"]["extraArgs"]
    return extra


@pytest.mark.parametrize("name", sorted(PLANS))
@pytest.mark.parametrize("fmt", ["compose", "helm"])
def test_vllm_parses_the_exported_command(probed: dict[str, Any], fmt: str, name: str) -> None:
    got = probed["vllm_argv"][f"{fmt}-{name}"]
    assert got["ok"], got.get("error")
    plan = PLANS[name]
    assert got["model"] == plan.model.path
    assert got["kv_cache_dtype"] == plan.cache.kv_cache_dtype
    assert got["tensor_parallel_size"] == plan.parallel.tensor_parallel_size
    assert got["max_model_len"] == plan.model.max_model_len
    kvt = got.get("kv_transfer")
    if plan.transfer.connector == "lmcache" and fmt == "compose":
        assert kvt["kv_connector"] == "LMCacheConnectorV1"
    elif plan.transfer.connector == "native" and plan.tier("disk") is not None:
        assert kvt["spec_class"] == "TieringOffloadingSpec"
        assert [t["unknown_keys"] for t in kvt["secondary_tiers"]] == [[]]
    elif plan.transfer.connector == "native":
        # --kv-offloading-size becomes an OffloadingConnector only inside VllmConfig (config/vllm.py).
        assert kvt is None and "--kv-offloading-size" in probed_argv(plan, fmt)
    else:
        assert kvt is None  # no connector, or helm where the chart adds LMCache's itself


@pytest.mark.parametrize("name", [n for n in sorted(PLANS) if PLANS[n].transfer.connector == "lmcache"])
def test_lmcache_loads_the_exported_config_without_warnings(probed: dict[str, Any], name: str) -> None:
    got = probed["lmcache_yaml"][name]
    assert got["ok"], got.get("error")
    assert got["warnings"] == []
    plan = PLANS[name]
    cpu = plan.tier("cpu")
    assert cpu is not None
    assert got["loaded"]["max_local_cpu_size"] == cpu.size_bytes_per_rank // (1 << 30)
    assert got["loaded"]["chunk_size"] == plan.cache.chunk_size
