"""A rendered launch without its offload tiers: what serving restarts when the canary finds wrong KV.

Every spec here is rendered by kvstack's real renderers from the plans the other engine tests use;
the oracle for the engine's command line is what kvstack renders for the same plan with
``--offload none``, which no code under test produces.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvstack.engines.base import HostFacts
from kvstack.engines.offload_drop import without_offload
from kvstack.engines.render import render
from kvstack.profiles import profiles_dir
from kvstack.runtime.specs import LaunchSpec
from tests.support.deps import require_engine_module
from tests.support.engine_probe import run_probe
from tests.unit.engines.cases import (
    API_KEY,
    CASES,
    DEMO_FACTS,
    HUB_FACTS,
    REDIS_URL,
    REDIS_URL_REDACTED,
    SOFTWARE,
    make_options,
    make_plan,
)

Layout = tuple[str, dict[str, Any], dict[str, Any], HostFacts]  # installed software, plan, options, facts


def golden(name: str, **options: Any) -> Layout:
    """The layout of a golden launch (tests/unit/engines/cases.py), ``options`` added to its own."""
    case = next(c for c in CASES if c.name == name)
    return case.software, case.plan, {**case.options, **options}, case.facts


LAYOUTS: dict[str, Layout] = {
    "vllm-lmcache-mp-tp2-cpu-disk-remote": golden(
        "vllm_lmcache-mp_llama8b_tp2_cpu_disk_remote", api_key=API_KEY
    ),
    "vllm-lmcache-mp-gated": (
        "vllm",
        {"connector": "lmcache-mp", "cpu_gib": 8, "gate_prompt_tokens": 1024},
        {},
        HUB_FACTS,
    ),
    "vllm-cpu-lmcache-mp-hybrid-off": (
        "vllm-cpu",
        {
            "model": "demo",
            "platform": "cpu",
            "gpu_gib": 1,
            "connector": "lmcache-mp",
            "cpu_gib": 2,
            "hybrid_manager": "off",
        },
        {},
        DEMO_FACTS,
    ),
    "vllm-lmcache-in-process-cpu-disk-remote": (
        "vllm",
        {
            "connector": "lmcache",
            "cpu_gib": 64,
            "disk_gib": 500,
            "remote_gib": 200,
            "remote_url": REDIS_URL_REDACTED,
        },
        {"remote_url": REDIS_URL},
        HUB_FACTS,
    ),
    "vllm-cpu-lmcache-in-process": golden("vllm-cpu_lmcache_demo_cpu_disk"),
    "vllm-native-cuda-cpu": golden("vllm_native_llama8b_cpu"),
    "vllm-native-cuda-tp2-cpu-disk": golden("vllm_native_llama8b_tp2_cpu_disk"),
    "sglang-hicache-tp2-cpu-disk": golden("sglang_hicache_llama8b_tp2_cpu_disk"),
    "sglang-hicache-small-host-pool": (
        "sglang",
        {"engine": "sglang", "connector": "hicache", "gpu_gib": 0.5, "cpu_gib": 0.75},
        {"api_key": API_KEY},
        HUB_FACTS,
    ),
}

# The flags that carry an offload tier into the engine (vLLM's connector and native offload, the
# hybrid-manager switch only a connector needs, SGLang's HiCache and its LMCache connector).
OFFLOAD_FLAGS = (
    "--kv-transfer-config",
    "--kv-offloading-size",
    "--kv-offloading-backend",
    "--disable-hybrid-kv-cache-manager",
    "--enable-hierarchical-cache",
    "--enable-hicache",
    "--enable-lmcache",
    "--lmcache-config-file",
)


def rendered(name: str, **plan_changes: Any) -> LaunchSpec:
    software, plan, options, facts = LAYOUTS[name]
    return render(make_plan(**{**plan, **plan_changes}), make_options(**options), SOFTWARE[software], facts)


def offload_none(name: str) -> LaunchSpec:
    """The same plan served with --offload none (a gate exists only over a connector)."""
    return rendered(name, connector="none", gate_prompt_tokens=None)


def offload_flags(argv: list[str]) -> list[str]:
    names = [a.split("=", 1)[0] for a in argv]
    return [n for n in names if n in OFFLOAD_FLAGS or n.startswith("--hicache-")]


def is_subsequence(short: list[str], long: list[str]) -> bool:
    rest = iter(long)
    return all(any(a == b for b in rest) for a in short)


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_the_fallback_runs_the_engine_as_offload_none_would(name: str) -> None:
    spec = rendered(name)
    assert spec.connector != "none" and offload_flags(spec.server.argv)  # something to drop
    dropped = without_offload(spec)
    assert dropped is not None
    argv = dropped.server.argv
    assert offload_flags(argv) == []
    assert argv == offload_none(name).server.argv  # what --offload none launches
    assert is_subsequence(argv, spec.server.argv)  # every other argument kept, in its order
    assert dropped.connector == "none" and dropped.connector_version is None
    assert dropped.helpers == [] and dropped.cache_server_url is None and dropped.tier_adapters == {}
    env = dropped.server.env
    assert not [k for k in env if k.startswith("LMCACHE_")]
    assert env == {k: v for k, v in spec.server.env.items() if not k.startswith("LMCACHE_")}
    assert dropped.server.name == spec.server.name and dropped.server.ready_url == spec.server.ready_url
    assert dropped.ports == spec.ports[:1] and dropped.metrics_urls == spec.metrics_urls[:1]
    assert dropped.notes[: len(spec.notes)] == spec.notes and len(dropped.notes) == len(spec.notes) + 1
    assert "offload tiers were turned off" in dropped.notes[-1]
    assert spec == rendered(name)  # the running spec is left as it was


def test_the_cache_server_is_not_started_and_its_ports_are_free() -> None:
    spec = rendered("vllm-lmcache-mp-tp2-cpu-disk-remote")
    assert len(spec.helpers) == 1 and spec.ports == [9000, 9001, 9002] and len(spec.metrics_urls) == 2
    dropped = without_offload(spec)
    assert dropped is not None
    assert dropped.helpers == [] and dropped.ports == [9000]
    assert dropped.metrics_urls == ["http://127.0.0.1:9000/metrics"]
    assert REDIS_URL.split("@")[0].split(":")[-1] not in json.dumps(dropped.public())


def test_the_hybrid_manager_switch_goes_with_the_connector_that_needed_it() -> None:
    spec = rendered("vllm-cpu-lmcache-mp-hybrid-off")
    assert "--disable-hybrid-kv-cache-manager" in spec.server.argv
    dropped = without_offload(spec)
    assert dropped is not None and "--disable-hybrid-kv-cache-manager" not in dropped.server.argv


def test_the_hybrid_manager_stays_off_where_the_pool_is_pinned_in_blocks() -> None:
    """With the manager back on, a block is another size: Gemma 3's fallback with 40 blocks died."""
    spec = rendered("vllm-cpu-lmcache-mp-hybrid-off")
    spec = spec.model_copy(
        update={
            "server": spec.server.model_copy(
                update={"argv": [*spec.server.argv, "--num-gpu-blocks-override", "40"]}
            )
        }
    )
    dropped = without_offload(spec)
    assert dropped is not None and "--kv-transfer-config" not in dropped.server.argv
    assert "--disable-hybrid-kv-cache-manager" in dropped.server.argv
    assert dropped.server.argv[-2:] == ["--num-gpu-blocks-override", "40"]


def test_the_in_process_connector_loses_its_config_variable() -> None:
    spec = rendered("vllm-lmcache-in-process-cpu-disk-remote")
    assert "LMCACHE_CONFIG_FILE" in spec.server.env
    dropped = without_offload(spec)
    assert dropped is not None and "LMCACHE_CONFIG_FILE" not in dropped.server.env
    assert dropped.server.unset_env_prefixes == ["LMCACHE_"]  # inherited LMCACHE_* stay cleared


def test_a_launch_without_offload_has_nothing_to_drop() -> None:
    for name in ("vllm-native-cuda-cpu", "sglang-hicache-tp2-cpu-disk", "vllm-cpu-lmcache-in-process"):
        spec = offload_none(name)
        assert spec.connector == "none" and without_offload(spec) is None


def test_sglangs_lmcache_connector_goes_too() -> None:
    plan: dict[str, Any] = {"engine": "sglang", "connector": "lmcache-mp", "cpu_gib": 64, "disk_gib": 500}
    spec = render(make_plan(**plan), make_options(), SOFTWARE["sglang"], HUB_FACTS)
    dropped = without_offload(spec)
    assert dropped is not None and dropped.helpers == []
    none = render(make_plan(**{**plan, "connector": "none"}), make_options(), SOFTWARE["sglang"], HUB_FACTS)
    assert offload_flags(dropped.server.argv) == []
    assert dropped.server.argv == none.server.argv


def launcher_tail(argv: list[str]) -> list[str]:
    """The arguments vLLM's parser sees (tests/integration/test_engine_parsers.py does the same)."""
    return argv[3:] if argv[3] != "serve" else argv[4:]


@pytest.mark.integration
def test_vllms_own_parser_reads_every_fallback_without_a_connector(tmp_path: Path) -> None:
    """vLLM's serve parser and engine args (tests/integration/engine_probe.py, in the engine's
    python) on every vLLM layout for the bundled demo model (its real directory: vLLM resolves
    the model while reading its arguments, and unit tests reach no hub): the fallback parses,
    and vLLM sees no KV connector and the hybrid manager on, where the launch it replaces has them."""
    py = require_engine_module("vllm")
    demo = str(profiles_dir() / "demo")
    pairs = {}
    for name, (software, plan, options, _) in LAYOUTS.items():
        if software.startswith("vllm"):
            served = make_plan(**{**plan, "model": "demo"})
            served.model = served.model.model_copy(update={"path": demo})
            spec = render(served, make_options(**options), SOFTWARE[software], DEMO_FACTS)
            dropped = without_offload(spec)
            assert dropped is not None
            pairs[name] = (spec, dropped)
    job: dict[str, dict[str, list[str]]] = {"vllm_argv": {}}
    for name, (spec, dropped) in pairs.items():
        job["vllm_argv"][f"{name}/launch"] = launcher_tail(spec.server.argv)
        job["vllm_argv"][f"{name}/fallback"] = launcher_tail(dropped.server.argv)
    results = run_probe(py, job, tmp_path, 300)["vllm_argv"]
    for name, (spec, _) in pairs.items():
        launch, fallback = results[f"{name}/launch"], results[f"{name}/fallback"]
        assert launch.get("ok") and fallback.get("ok"), (name, launch.get("error"), fallback.get("error"))
        assert "kv_transfer" in launch, name  # the probe does see a connector where one is rendered
        assert "kv_transfer" not in fallback, name  # vLLM's kv_transfer_config is None
        hybrid_off = "--disable-hybrid-kv-cache-manager" in spec.server.argv
        assert launch["disable_hybrid_kv_cache_manager"] is (True if hybrid_off else None), name
        assert fallback["disable_hybrid_kv_cache_manager"] is None, name
        for key in (
            "model",
            "port",
            "served_model_name",
            "max_model_len",
            "tensor_parallel_size",
            "kv_cache_dtype",
        ):
            assert fallback[key] == launch[key], (name, key)
    assert any("--disable-hybrid-kv-cache-manager" in s.server.argv for s, _ in pairs.values())
