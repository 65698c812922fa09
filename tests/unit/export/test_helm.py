"""Helm values for the vLLM production-stack chart, checked against the Plan they come from."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kvstack.errors import UnsupportedError
from kvstack.export import ExportOptions, export_plan
from kvstack.export.deployment import LMCACHE_HASH
from kvstack.export.secrets import HASH_SEED
from kvstack.units import GIB
from tests.unit.export.plans import make_plan

PASSWORD = "hunter22-secret"

# modelSpec keys the chart knows (vllm-project/production-stack a6c01db, helm/values.schema.json
# servingEngineSpec.modelSpec.items.properties) and lmcacheConfig keys its deployment template reads.
CHART_MODELSPEC_KEYS = {
    "name", "repository", "tag", "modelURL", "replicaCount", "requestCPU", "requestMemory", "requestGPU",
    "pvcStorage", "shmSize", "enableLoRA", "env", "vllmConfig", "lmcacheConfig",
}  # fmt: skip
CHART_VLLMCONFIG_KEYS = {
    "enablePrefixCaching", "maxModelLen", "dtype", "tensorParallelSize", "gpuMemoryUtilization", "extraArgs",
}  # fmt: skip
CHART_LMCACHE_KEYS = {"enabled", "cpuOffloadingBufferSize", "diskOffloadingBufferSize", "logLevel"}


def spec_of(values: dict[str, Any]) -> dict[str, Any]:
    specs = values["servingEngineSpec"]["modelSpec"]
    assert isinstance(specs, list) and len(specs) == 1
    spec: dict[str, Any] = specs[0]
    return spec


def env_of(spec: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in spec["env"]}


def gi(text: str) -> int:
    assert text.endswith("Gi"), text
    return int(text[:-2])


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_values_parse_and_match_the_plan(tp: int) -> None:
    plan = make_plan(tp=tp, cpu_gib_per_rank=40, disk_gib_per_rank=300)
    bundle = export_plan("helm", plan, ExportOptions())
    assert [f.name for f in bundle.files] == ["values.yaml", "grafana-dashboard.yaml", "kvstack-canary.yaml"]
    spec = spec_of(yaml.safe_load(bundle.main.content))
    assert set(spec) <= CHART_MODELSPEC_KEYS
    assert set(spec["vllmConfig"]) <= CHART_VLLMCONFIG_KEYS
    assert set(spec["lmcacheConfig"]) <= CHART_LMCACHE_KEYS
    assert spec["modelURL"] == plan.model.path
    assert spec["requestGPU"] == tp
    assert env_of(spec)["PYTHONHASHSEED"] == HASH_SEED  # every pod hashes alike (docs/shared-tier.md)
    vc = spec["vllmConfig"]
    assert vc["tensorParallelSize"] == tp
    assert vc["maxModelLen"] == plan.model.max_model_len
    assert vc["gpuMemoryUtilization"] == plan.cache.gpu_memory_utilization
    assert vc["dtype"] == plan.model.geometry.dtype
    # The chart passes --no-enable-prefix-caching unless this is true (deployment-vllm-multi.yaml).
    assert vc["enablePrefixCaching"] is True
    args = vc["extraArgs"]
    assert args[args.index("--kv-cache-dtype") + 1] == plan.cache.kv_cache_dtype
    assert "--kv-transfer-config" not in args  # the chart adds LMCacheConnectorV1 itself
    cpu, disk = plan.tier("cpu"), plan.tier("disk")
    assert cpu is not None and disk is not None
    lm = spec["lmcacheConfig"]
    assert lm["enabled"] is True
    # Whole GiB per TP rank: the chart gates the CPU tier on `int cpuOffloadingBufferSize > 0`.
    assert lm["cpuOffloadingBufferSize"] == cpu.size_bytes_per_rank // GIB
    assert lm["diskOffloadingBufferSize"] == disk.size_bytes_per_rank // GIB
    env = env_of(spec)
    assert env["LMCACHE_LOCAL_DISK"].startswith("file:///data/")  # on the PVC the chart mounts at /data
    assert env["LMCACHE_CHUNK_SIZE"] == str(plan.cache.chunk_size)
    assert env["LMCACHE_PRE_CACHING_HASH_ALGORITHM"] == LMCACHE_HASH
    assert gi(spec["pvcStorage"]) * GIB >= plan.model.weight_bytes + disk.size_bytes
    assert gi(spec["requestMemory"]) * GIB >= cpu.size_bytes
    assert gi(spec["shmSize"]) * GIB >= cpu.size_bytes


@pytest.mark.parametrize(
    "url",
    [
        f"redis://kv:{PASSWORD}@10.0.0.5:6379/1",
        f"redis://10.0.0.5:6379/1?socket_timeout=5&password={PASSWORD}",
    ],
    ids=["userinfo", "query"],
)
def test_remote_url_with_a_password_goes_whole_through_a_secret_not_the_values(url: str) -> None:
    plan = make_plan(remote_gib=64, remote_url="redis://10.0.0.5:6379/1")
    bundle = export_plan("helm", plan, ExportOptions(remote_url=url))
    main = bundle.main
    assert PASSWORD not in main.content and main.mode == 0o644 and not main.secret
    env = env_of(spec_of(yaml.safe_load(main.content)))
    ref = env["LMCACHE_REMOTE_URL"]["secretKeyRef"]
    secret_file = next(f for f in bundle.files if f.name == "redis-secret.yaml")
    assert secret_file.secret and secret_file.mode == 0o600
    secret = yaml.safe_load(secret_file.content)
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == ref["name"]
    assert secret["stringData"][ref["key"]] == url  # the variable LMCache reads is the URL itself


def test_remote_without_password_is_inline_and_loopback_is_flagged() -> None:
    plan = make_plan(remote_gib=8)
    bundle = export_plan("helm", plan, ExportOptions(remote_url="redis://127.0.0.1:6379"))
    env = env_of(spec_of(yaml.safe_load(bundle.main.content)))
    assert env["LMCACHE_REMOTE_URL"] == "redis://127.0.0.1:6379"
    assert not any(f.secret for f in bundle.files)  # no password: no secret manifest
    assert any("loopback" in n for n in bundle.notes)


def test_native_offload_uses_vllm_flags_and_shm_for_the_cpu_tier() -> None:
    plan = make_plan(connector="native", disk_gib_per_rank=None, cpu_gib_per_rank=64, tp=2)
    spec = spec_of(yaml.safe_load(export_plan("helm", plan, ExportOptions()).main.content))
    args = spec["vllmConfig"]["extraArgs"]
    cpu = plan.tier("cpu")
    assert cpu is not None
    # --kv-offloading-size is the TOTAL across TP ranks, in GiB (vllm config/vllm.py).
    assert args[args.index("--kv-offloading-size") + 1] == str(cpu.size_bytes // GIB)
    assert spec["lmcacheConfig"] == {"enabled": False}
    assert spec["repository"] == "vllm/vllm-openai"
    assert gi(spec["shmSize"]) * GIB > cpu.size_bytes  # the native CPU tier is an mmap in /dev/shm


def test_local_model_directory_is_mapped_onto_the_pvc() -> None:
    plan = make_plan(model_path="/srv/models/llama-8b")
    bundle = export_plan("helm", plan, ExportOptions())
    assert spec_of(yaml.safe_load(bundle.main.content))["modelURL"] == "/data/models/llama-8b"
    assert any("/data/models/llama-8b" in n for n in bundle.notes)


def test_image_pinned_from_the_installed_engine_or_overridden() -> None:
    plan = make_plan(connector="none", cpu_gib_per_rank=None, disk_gib_per_rank=None)
    spec = spec_of(
        yaml.safe_load(export_plan("helm", plan, ExportOptions(engine_version="0.33.0")).main.content)
    )
    assert (spec["repository"], spec["tag"]) == ("vllm/vllm-openai", "v0.33.0")
    spec = spec_of(
        yaml.safe_load(
            export_plan("helm", plan, ExportOptions(image="registry:5000/me/vllm:abc")).main.content
        )
    )
    assert (spec["repository"], spec["tag"]) == ("registry:5000/me/vllm", "abc")


@pytest.mark.parametrize(
    ("engine", "connector"), [("sglang", "hicache"), ("sglang", "none"), ("vllm", "lmcache-mp")]
)
def test_what_the_chart_cannot_run_is_refused(engine: str, connector: str) -> None:
    with pytest.raises(UnsupportedError) as err:
        export_plan("helm", make_plan(engine=engine, connector=connector), ExportOptions())
    assert err.value.hint


def test_remote_with_a_connector_without_remote_tier_is_refused() -> None:
    with pytest.raises(UnsupportedError) as err:
        export_plan("helm", make_plan(connector="native"), ExportOptions(remote_url="redis://cache:6379"))
    assert "lmcache" in f"{err.value.message} {err.value.hint}"
