"""What a rendered engine stores on a shared tier as (runtime/tier_kv.py), read from the plan, the
renderer's own choices and the user's engine arguments after ``--`` (the engines' parsers keep the
last value, so a flag there overrides kvstack's): the one place that says who set each field.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from kvstack.connectors import spec_of
from kvstack.engines.base import RenderRequest
from kvstack.engines.lmcache import MP_SERVER_NAME
from kvstack.engines.owned_flags import sets_flag
from kvstack.engines.versions import LMCACHE_HASH_ALGORITHM
from kvstack.runtime.specs import LaunchSpec, ProcessSpec
from kvstack.runtime.tier_kv import ENGINE_ARGS, ENVIRONMENT, FIELDS, KVSTACK, TierKv

HASH_SEED_ENV = "PYTHONHASHSEED"
# Engine flags that change how KV is stored; vLLM also reads -tp for --tensor-parallel-size.
ENGINE_FLAGS = {
    "kv_cache_dtype": ("--kv-cache-dtype", ()),
    "block_tokens": ("--block-size", ()),
    "tensor_parallel_size": ("--tensor-parallel-size", ("-tp",)),
}


def engine_arg(extra_args: list[str], flag: str, aliases: tuple[str, ...] = ()) -> str | None:
    """The value the engine's parser ends with for ``flag`` among ``extra_args`` (the last one)."""
    value = None
    for i, arg in enumerate(extra_args):
        if arg.split("=", 1)[0] in aliases or sets_flag(arg, flag):
            if "=" in arg:
                value = arg.split("=", 1)[1]
            elif i + 1 < len(extra_args):
                value = extra_args[i + 1]
    return value


def child_env(proc: ProcessSpec, name: str, environ: Mapping[str, str]) -> str | None:
    """``name`` as ``proc`` will see it: its own env, else the parent's unless it is unset."""
    if name in proc.env:
        return proc.env[name]
    if name in proc.unset_env or any(name.startswith(p) for p in proc.unset_env_prefixes):
        return None
    return environ.get(name)


def hashing_process(spec: LaunchSpec) -> ProcessSpec:
    """The process that hashes the tokens: LMCache's cache server in MP mode, else the engine."""
    return next((h for h in spec.helpers if h.name == MP_SERVER_NAME), spec.server)


def shares_a_tier(req: RenderRequest, spec: LaunchSpec) -> bool:
    """The engine writes to a remote tier other engines may share (LMCache's, the only kind)."""
    remote = req.plan.tier("remote")
    has_remote = req.plan.transfer.remote_url is not None or (remote is not None and remote.size_bytes > 0)
    return has_remote and spec_of(spec.connector).remote


def tier_kv(req: RenderRequest, spec: LaunchSpec, environ: Mapping[str, str] | None = None) -> TierKv:
    """Read from the engine's final argv (kvstack's flags, then the user's, the last one winning) and
    the environment of the process that hashes."""
    plan, facts, argv, extra = req.plan, req.facts, spec.server.argv, req.options.extra_args
    set_by = {
        field: ENGINE_ARGS
        for field, (flag, aliases) in ENGINE_FLAGS.items()
        if engine_arg(extra, flag, aliases) is not None
    }
    values = {field: engine_arg(argv, flag, aliases) for field, (flag, aliases) in ENGINE_FLAGS.items()}
    kv_dtype = values["kv_cache_dtype"] or plan.cache.kv_cache_dtype
    if kv_dtype == "auto" and plan.model.geometry.checkpoint_dtype is not None:
        # KV at the compute dtype (planning/compute_dtype.py): a float32 engine's bytes are not a bf16
        # one's. Shown as "auto (float32)", so that writers at the checkpoint's dtype keep their fingerprint.
        kv_dtype = f"auto ({plan.model.geometry.dtype})"
        if engine_arg(extra, "--dtype") is not None:
            set_by["kv_cache_dtype"] = ENGINE_ARGS
    seed = child_env(hashing_process(spec), HASH_SEED_ENV, os.environ if environ is None else environ)
    if seed is not None:
        set_by["hash_seed"] = ENVIRONMENT
    block, tp = values["block_tokens"], values["tensor_parallel_size"]
    return TierKv(
        model=plan.model.path if facts.model_commit is None else f"{plan.model.path}@{facts.model_commit}",
        revision=(facts.model_config_sha256 or "")[:12] or None,
        weights="dummy" if engine_arg(argv, "--load-format") == "dummy" else "real",
        kv_cache_dtype=kv_dtype,
        chunk_tokens=plan.cache.chunk_size,
        block_tokens=int(block) if block is not None and block.isdigit() else None,
        hash_algorithm=LMCACHE_HASH_ALGORITHM,
        hash_seed=seed,
        tensor_parallel_size=int(tp)
        if tp is not None and tp.isdigit()
        else plan.parallel.tensor_parallel_size,
        connector=spec.connector,
        connector_version=spec.connector_version,
        set_by={name: set_by.get(name, KVSTACK) for name in FIELDS},
    )
