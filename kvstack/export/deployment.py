"""What a plan asks of a deployment, whatever writes it: names, sizes, the image, engine arguments."""

from __future__ import annotations

import json
import math
import re
from pathlib import PurePosixPath

from kvstack.errors import UnsupportedError
from kvstack.export.bundle import ExportOptions
from kvstack.planning.schema import Plan
from kvstack.remote.url import RemoteURL, parse_remote_url, require_remote_support
from kvstack.units import GIB

# Headroom in /dev/shm beyond the CPU tier: NCCL and the engine's IPC buffers live there too.
SHM_HEADROOM_BYTES = 2 * GIB
# Host memory an engine process needs besides the CPU tier (per GPU rank): the Python process,
# CUDA context, staging buffers while loading weights.
HOST_BASE_BYTES_PER_RANK = 8 * GIB
# pre_caching_hash_algorithm "builtin" is Python's salted hash(): keys would differ between
# processes and replicas sharing a remote tier; lmcache 0.5.6 maps this name to vLLM's sha256_cbor.
LMCACHE_HASH = "sha256_cbor_64bit"
PASSWORD_ENV = "KVSTACK_REDIS_PASSWORD"
# vLLM's in-process LMCache connector.
LMCACHE_CONNECTOR_ARGS = (
    "--kv-transfer-config",
    json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}),
)


def gib_floor(n_bytes: int) -> int:
    """Whole GiB, rounded down so a written size never exceeds what the plan sized."""
    return n_bytes // GIB


def gib_ceil(n_bytes: float) -> int:
    return max(1, math.ceil(n_bytes / GIB))


def canary_runs(plan: Plan) -> bool:
    """Whether a deployment of ``plan`` runs the KV canary: only where offload tiers serve hits, as
    ``kvstack serve`` decides (serving/lifecycle.py canary_off_reason)."""
    return plan.offloads and bool(plan.offload_tiers)


def deployment_name(plan: Plan, override: str | None = None) -> str:
    """A DNS-1123 label (Kubernetes names, compose project names): lowercase, digits, '-'."""
    base = override or PurePosixPath(plan.model.name).name or "model"
    name = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")[:63].strip("-")
    return name or "model"


def local_model(plan: Plan) -> bool:
    return plan.model_path.startswith("/")


def remote(options: ExportOptions, plan: Plan) -> RemoteURL | None:
    """The parsed remote URL, refused when the plan's connector has no remote tier."""
    if not options.remote_url:
        return None
    url = parse_remote_url(options.remote_url)
    require_remote_support(plan.connector, url)
    return url


def require_connector(plan: Plan, supported: tuple[str, ...], fmt: str, hint: str) -> None:
    if plan.connector not in supported:
        raise UnsupportedError(
            f"--format {fmt} cannot deploy {plan.engine} with connector '{plan.connector}' "
            f"(supported: {', '.join(supported)})",
            hint=hint,
        )


def require_vllm(plan: Plan, platform: str, fmt: str, connectors: tuple[str, ...], hint: str) -> None:
    """Refuse a plan ``platform`` cannot run: another engine, or a connector not in ``connectors``."""
    if plan.engine != "vllm":
        raise UnsupportedError(
            f"{platform} runs vLLM, this plan uses {plan.engine}",
            hint="use --engine vllm, or --format compose / systemd for SGLang",
        )
    require_connector(plan, connectors, fmt, hint)


def pod_resources(plan: Plan) -> dict[str, dict[str, str]]:
    """A vLLM pod's requests and limits: an API server plus a busy worker per GPU rank on the host
    side, host memory for the CPU tier and the process, and the GPUs (requests equal to limits)."""
    tp = plan.tensor_parallel_size
    requests = {"cpu": str(2 + 4 * tp), "memory": f"{gib_ceil(host_memory_bytes(plan))}Gi"}
    limits: dict[str, str] = {}
    if plan.platform == "cuda":
        requests["nvidia.com/gpu"] = limits["nvidia.com/gpu"] = str(tp)
    return {"requests": requests, "limits": limits}


def shm_volume(plan: Plan) -> tuple[dict[str, object], dict[str, object]]:
    """(the pod's /dev/shm volume, its mount): a memory emptyDir sized by ``shm_bytes``."""
    size = f"{gib_ceil(shm_bytes(plan))}Gi"
    return (
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": size}},
        {"name": "dshm", "mountPath": "/dev/shm"},
    )


def engine_image(plan: Plan, options: ExportOptions) -> tuple[str, str, list[str]]:
    """(repository, tag, notes)."""
    if options.image:
        repo, sep, tag = options.image.rpartition(":")
        if not sep or "/" in tag:  # "host:5000/img" has a port, not a tag
            return options.image, "latest", []
        return repo, tag, []
    notes: list[str] = []
    if plan.engine == "sglang":
        repo, tag = "lmsysorg/sglang", "latest"
    elif plan.connector == "lmcache":
        # vllm/vllm-openai does not ship LMCache; the production-stack chart's own default image
        # does (helm/values.yaml modelSpec.repository "lmcache/vllm-openai").
        repo, tag = "lmcache/vllm-openai", "latest"
    else:
        repo = "vllm/vllm-openai"
        tag = f"v{options.engine_version}" if options.engine_version else "latest"
    if tag == "latest":
        notes.append(
            f"the image {repo}:latest is not pinned: pin a tag (--image REPO:TAG) for repeatable deploys"
        )
    return repo, tag, notes


def shm_bytes(plan: Plan) -> int:
    """/dev/shm size: vLLM's native CPU tier is an mmap in /dev/shm (vllm/v1/kv_offload/cpu); a tmpfs
    size is a cap, not a reservation, so sizing it for the CPU tier costs nothing unused."""
    cpu = plan.tier("cpu")
    return (cpu.size_bytes if cpu else 0) + SHM_HEADROOM_BYTES


def host_memory_bytes(plan: Plan) -> int:
    cpu = plan.tier("cpu")
    return (cpu.size_bytes if cpu else 0) + HOST_BASE_BYTES_PER_RANK * plan.tensor_parallel_size


def lmcache_settings(plan: Plan, disk_dir: str | None, remote_url: str | None) -> dict[str, object]:
    """LMCache in-process keys (lmcache 0.5.6 v1/config.py; sizes in GiB PER TP RANK).

    The CPU tier stays on whenever disk or remote is on (``local_cpu: false`` with a disk tier
    asserts in some LMCache versions).
    """
    cfg: dict[str, object] = {
        "chunk_size": plan.chunk_size,
        "local_cpu": True,
        "pre_caching_hash_algorithm": LMCACHE_HASH,
    }
    cpu = plan.tier("cpu")
    if cpu is not None:
        cfg["max_local_cpu_size"] = gib_floor(cpu.size_bytes_per_rank)
    disk = plan.tier("disk")
    if disk is not None and disk_dir:
        cfg["local_disk"] = f"file://{disk_dir.rstrip('/')}/"
        cfg["max_local_disk_size"] = gib_floor(disk.size_bytes_per_rank)
    if remote_url:
        cfg["remote_url"] = remote_url
        cfg["remote_serde"] = "naive"
    return cfg


def lmcache_env(plan: Plan, disk_dir: str | None) -> list[dict[str, object]]:
    """``lmcache_settings`` as the LMCACHE_* variables LMCache reads (lmcache 0.5.6 v1/config.py)."""
    return [
        {"name": f"LMCACHE_{key.upper()}", "value": str(value)}
        for key, value in lmcache_settings(plan, disk_dir, None).items()
    ]


def lmcache_in_engine(
    plan: Plan, options: ExportOptions, disk_dir: str | None, platform: str, notes: list[str]
) -> tuple[str, list[str], list[dict[str, object]]]:
    """(image, vLLM arguments, environment) that run the plan's LMCache tiers inside the engine
    (LMCacheConnectorV1, settings as LMCACHE_* variables), for a platform with no LMCache server;
    what that costs is added to ``notes``."""
    as_lmcache = plan.model_copy(update={"connector": "lmcache"})
    repo, tag, image_notes = engine_image(as_lmcache, options)
    notes += [*image_notes, *in_process_note(plan, platform)]
    return f"{repo}:{tag}", [*LMCACHE_CONNECTOR_ARGS], lmcache_env(plan, disk_dir)


def unsupervised_notes(plan: Plan, platform: str) -> list[str]:
    """What a platform that runs no kvstack process beside the engine cannot carry."""
    gate = (
        [
            f"kvstack's per-request gate (prompts under {plan.gate_prompt_tokens} tokens skip the lookup) "
            f"is not carried: {platform} runs no kvstack process beside the engine"
        ]
        if plan.gate_prompt_tokens
        else []
    )
    return [
        *gate,
        f"the KV canary is not exported for {platform}: run kvstack canary --url against the service",
    ]


def in_process_note(plan: Plan, platform: str) -> list[str]:
    """What an export that runs no LMCache server does with an lmcache-mp plan."""
    if plan.connector != "lmcache-mp":
        return []
    return [
        f"{platform} runs no LMCache server beside the engine: the plan's lmcache-mp tiers run as "
        "in-process LMCache (LMCacheConnectorV1) with the same sizes"
    ]


def vllm_kv_args(plan: Plan, disk_dir: str | None, with_lmcache_connector: bool = True) -> list[str]:
    """The KV-related vLLM arguments."""
    args = ["--kv-cache-dtype", plan.kv_cache_dtype, *plan.dtype_args()]
    cpu = plan.tier("cpu")
    disk = plan.tier("disk")
    if plan.connector == "lmcache" and with_lmcache_connector:
        args += [*LMCACHE_CONNECTOR_ARGS]
    elif plan.connector == "native" and cpu is not None:
        if disk is not None and disk_dir:
            # The full form is the only one with a disk tier (vllm/v1/kv_offload/tiering/spec.py);
            # cpu_bytes_to_use is the total across ranks, as --kv-offloading-size (config/vllm.py).
            extra = {
                "spec_name": "TieringOffloadingSpec",
                "cpu_bytes_to_use": cpu.size_bytes,
                "secondary_tiers": [{"type": "fs", "root_dir": disk_dir}],
            }
            cfg = {
                "kv_connector": "OffloadingConnector",
                "kv_role": "kv_both",
                "kv_connector_extra_config": extra,
            }
            args += ["--kv-transfer-config", json.dumps(cfg)]
        else:
            args += [
                "--kv-offloading-size",
                str(gib_floor(cpu.size_bytes)),
                "--kv-offloading-backend",
                "native",
            ]
    return args


def sglang_args(plan: Plan, disk_dir: str | None) -> tuple[list[str], dict[str, str]]:
    """SGLang arguments and environment."""
    args = [
        "--tp-size", str(plan.tensor_parallel_size),
        "--context-length", str(plan.max_model_len),
        "--kv-cache-dtype", plan.kv_cache_dtype,
        *plan.dtype_args(),
        "--mem-fraction-static", str(plan.gpu_memory_utilization),
        "--enable-metrics", "--enable-cache-report",
    ]  # fmt: skip
    env: dict[str, str] = {}
    cpu = plan.tier("cpu")
    disk = plan.tier("disk")
    if plan.connector == "hicache" and cpu is not None:
        # --hicache-size is decimal GB per rank (sglang memory_pool_host.py: hicache_size * 1e9).
        args += [
            "--enable-hierarchical-cache",
            "--hicache-size", str(max(1, cpu.size_bytes_per_rank // 10**9)),
            "--hicache-write-policy", "write_through",
        ]  # fmt: skip
        if disk is not None and disk_dir:
            args += ["--page-size", "64", "--hicache-storage-backend", "file"]
            env["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] = disk_dir
            env["SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE"] = f"{max(1, disk.size_bytes // 10**9)}G"
    return args, env
