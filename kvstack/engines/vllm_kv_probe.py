"""The child side of the engine's KV spec probe: run by the engine's Python, never imported by kvstack.

    python vllm_kv_probe.py JOB.json

JOB: {"model": DIR, "max_model_len": N | null, "kv_cache_dtype": "auto", "enable_prefix_caching": bool,
"dtype": "auto"}.
Prints one JSON object on its last stdout line (kvstack/engines/vllm_kv_spec.py reads it).

It asks vLLM what the engine would allocate, the way the engine does it: ``EngineArgs(...)
.create_engine_config()`` (the CPU platform, ``load_format`` dummy), the model class built on the
``meta`` device under ``set_current_vllm_config`` (a single-rank gloo group for the model-parallel
layers), the platform's ``update_block_size_for_backend`` as the executor calls it, each layer's
``get_kv_cache_spec(vllm_config)`` from the static forward context as
``GPUModelRunner.get_kv_cache_spec`` collects them (cross-layer shared layers skipped), then
``get_kv_cache_groups`` (vllm/v1/core/kv_cache_utils.py) with the hybrid KV cache manager on and
off. A refusal (the config or the model class raises) is reported with the engine's own message.
Self-contained on purpose: only the standard library, torch and vllm are imported.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import math
import os
import socket
import sys
import traceback
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vllm.v1.kv_cache_interface import KVCacheSpec

# The job read and the result printed: kvstack.jsonvalue.JsonObject, spelled out here because this
# file imports nothing of kvstack (it runs under the engine's Python).
_JsonObject = dict[str, Any]

_MANAGER_OFF = "disable_hybrid_kv_cache_manager"


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())[:600]


def _engine_config(job: _JsonObject) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    make = functools.partial(
        EngineArgs,
        model=job["model"],
        load_format="dummy",
        kv_cache_dtype=job.get("kv_cache_dtype") or "auto",
        dtype=job.get("dtype") or "auto",
        enable_prefix_caching=job.get("enable_prefix_caching", True),
        trust_remote_code=False,
    )
    args = make(max_model_len=int(job["max_model_len"])) if job.get("max_model_len") else make()
    return args.create_engine_config()


def _init_distributed() -> None:
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    init_distributed_environment(
        world_size=1,
        rank=0,
        distributed_init_method=f"tcp://127.0.0.1:{port}",
        local_rank=0,
        backend="gloo",
    )
    initialize_model_parallel(1, 1)


def _build_model(config: Any) -> None:
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import get_model_architecture

    with set_current_vllm_config(config):
        _init_distributed()
        with torch.device("meta"):
            model_cls, _ = get_model_architecture(config.model_config)
            model_cls(vllm_config=config, prefix="")
        # As the executor does once the worker loaded the model (v1/executor/uniproc_executor.py):
        # a hybrid's attention block grows until a page holds a state layer's.
        from vllm.platforms import current_platform

        current_platform.update_block_size_for_backend(config)


def _layer_specs(config: Any) -> tuple[dict[str, KVCacheSpec], dict[str, str]]:
    """Each layer's spec, as GPUModelRunner.get_kv_cache_spec collects them."""
    from vllm.config import get_layers_from_vllm_config
    from vllm.model_executor.layers.attention import Attention
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase
    from vllm.v1.kv_cache_interface import AttentionSpec
    from vllm.v1.worker.utils import customize_attention_spec

    specs: dict[str, KVCacheSpec] = {}
    shared: dict[str, str] = {}
    base: Any = AttentionLayerBase  # abstract: the runner casts it the same way
    for name, layer in get_layers_from_vllm_config(config, base).items():
        target = getattr(layer, "kv_sharing_target_layer_name", None)
        if isinstance(layer, Attention) and target:
            shared[name] = target
            continue
        spec = layer.get_kv_cache_spec(config)
        if spec is None:
            continue
        if isinstance(spec, AttentionSpec):
            spec = customize_attention_spec(layer.get_attn_backend(), spec)
        specs[name] = spec
    return specs, shared


def _resolve_layout(config: Any, specs: dict[str, KVCacheSpec]) -> None:
    """The KV cache layout, resolved as EngineCore does before it sizes the pool (v1/engine/core.py)."""
    from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        resolve_kv_cache_layout,
    )

    layouts = [x.name for x in get_supported_kv_cache_layouts(get_current_attn_backends(config))]
    resolve_kv_cache_layout(config, [layouts], list(specs.values()))


def _kind(spec: Any) -> str:
    from vllm.v1 import kv_cache_interface as kvi

    for cls_name, kind in (
        ("MambaSpec", "state"),
        ("SlidingWindowSpec", "sliding"),
        ("ChunkedLocalAttentionSpec", "chunked"),
        ("MLAAttentionSpec", "mla"),
        ("FullAttentionSpec", "full"),
    ):
        cls = getattr(kvi, cls_name, None)
        if cls is not None and isinstance(spec, cls):
            return kind
    return type(spec).__name__


def _one_spec(spec: Any) -> Any:
    inner = getattr(spec, "kv_cache_specs", None)  # UniformTypeKVCacheSpecs
    return next(iter(inner.values())) if isinstance(inner, dict) and inner else spec


def _group(config: Any, group: Any) -> _JsonObject:
    spec = group.kv_cache_spec
    one = _one_spec(spec)
    kind = _kind(one)
    page = int(spec.page_size_bytes)
    out: _JsonObject = {
        "kind": kind,
        "spec_type": type(one).__name__,
        "layer_names": list(group.layer_names),
        "block_size": int(one.block_size),
        "page_size_bytes": page,
        "blocks_per_request": math.ceil(spec.max_memory_usage_bytes(config) / page) if page else 0,
        "sliding_window": getattr(one, "sliding_window", None),
        "attention_chunk": getattr(one, "attention_chunk_size", None),
    }
    if kind == "state":
        out["state_shapes"] = [list(s) for s in one.shapes]
        out["state_dtypes"] = [str(d).removeprefix("torch.") for d in one.dtypes]
        out["mamba_type"] = str(getattr(one, "mamba_type", ""))
        out["bytes_per_token"] = 0
    else:
        out["dtype"] = str(one.dtype).removeprefix("torch.")
        out["bytes_per_token"] = int(one.real_page_size_bytes // one.block_size)
    return out


def _layout(config: Any, specs: dict[str, KVCacheSpec], manager_off: bool) -> _JsonObject:
    from vllm.v1.core import kv_cache_utils as kcu

    sched = config.scheduler_config
    saved = getattr(sched, _MANAGER_OFF)
    setattr(sched, _MANAGER_OFF, manager_off)
    try:
        groups = kcu.get_kv_cache_groups(config, copy.deepcopy(specs))
        per_block = kcu._pool_bytes_per_block(config, groups) if groups else 0
    except Exception as exc:
        return {"ok": False, "reason": _reason(exc)}
    finally:
        setattr(sched, _MANAGER_OFF, saved)
    rows = [_group(config, g) for g in groups]
    return {
        "ok": True,
        "groups": rows,
        "bytes_per_block": int(per_block),
        "blocks_per_request": sum(r["blocks_per_request"] for r in rows),
    }


def probe(job: _JsonObject) -> _JsonObject:
    import vllm

    out: _JsonObject = {"vllm_version": vllm.__version__, "ok": False}
    try:
        config = _engine_config(job)
    except Exception as exc:
        return {**out, "stage": "config", "reason": _reason(exc)}
    mc = config.model_config
    from vllm.platforms import current_platform

    out.update(
        platform=str(current_platform.device_type),
        architecture=mc.architecture,
        max_model_len=int(mc.max_model_len),
        kv_cache_dtype=str(config.cache_config.cache_dtype),
        model_dtype=str(mc.dtype).removeprefix("torch."),
        max_num_batched_tokens=int(config.scheduler_config.max_num_batched_tokens),
        engine_manager_off=bool(getattr(config.scheduler_config, _MANAGER_OFF)),
        prefix_caching=bool(config.cache_config.enable_prefix_caching),
        # What the engine runs with when no flag says: vllm/engine/arg_utils.py takes
        # model_config.is_prefix_caching_supported (off for Mamba1, which the probe's explicit
        # enable_prefix_caching above does not show).
        default_prefix_caching=bool(getattr(mc, "is_prefix_caching_supported", True)),
    )
    try:
        _build_model(config)
        specs, shared = _layer_specs(config)
        if specs:
            _resolve_layout(config, specs)
    except Exception as exc:
        # A model class that cannot be built on the meta device is this probe's limit, not the
        # engine's refusal: the parent falls back to its estimate.
        stage = "probe" if "meta" in str(exc).lower() else "model"
        return {**out, "stage": stage, "reason": _reason(exc)}
    out.update(
        ok=True,
        shared_layers=shared,
        manager_on=_layout(config, specs, False),
        manager_off=_layout(config, specs, True),
    )
    return out


def main() -> int:
    # Run by path, this file's folder (kvstack/engines, which has a vllm.py) must not shadow vllm.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    with open(sys.argv[1], encoding="utf-8") as file:
        job = json.load(file)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    noise = io.StringIO()
    try:
        with contextlib.redirect_stdout(noise):
            result = probe(job)
    except Exception as exc:  # an import or a bug: say so, the parent reports it as unknown
        result = {
            "ok": False,
            "stage": "probe",
            "reason": _reason(exc),
            "trace": traceback.format_exc()[-2000:],
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
