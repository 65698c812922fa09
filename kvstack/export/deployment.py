"""What a plan asks of a deployment, whatever writes it: names, sizes, the image, engine arguments."""

from __future__ import annotations

import json
import math
import re
from pathlib import PurePosixPath

from kvstack.connectors import SPECS, spec_of
from kvstack.connectors.engines import ENGINE_SPECS, engine_spec
from kvstack.connectors.spec import ConnectorSpec
from kvstack.errors import UnsupportedError
from kvstack.export.bundle import ExportOptions
from kvstack.planning.schema import Plan
from kvstack.remote.url import require_remote_support
from kvstack.remoteurl import RemoteURL
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
    base = override or PurePosixPath(plan.model.geometry.name).name or "model"
    name = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")[:63].strip("-")
    return name or "model"


def local_model(plan: Plan) -> bool:
    return plan.model.path.startswith("/")


def remote(options: ExportOptions, plan: Plan) -> RemoteURL | None:
    """The parsed remote URL, refused when the plan's connector has no remote tier."""
    url = options.remote
    if url is None:
        return None
    require_remote_support(plan.transfer.connector, url)
    return url


def exports_engine(plan: Plan, fmt: str) -> bool:
    """Whether ``--format fmt`` runs the plan's engine (its EngineSpec's ``exports``)."""
    return fmt in engine_spec(plan.engine).exports


def require_connector(plan: Plan, fmt: str, hint: str) -> None:
    """Refuse a plan whose connector ``fmt`` cannot deploy, naming those of its engine it can."""
    spec = spec_of(plan.transfer.connector)
    if fmt not in spec.exports or plan.engine not in spec.engines:
        supported = [s.name for s in SPECS.values() if fmt in s.exports and plan.engine in s.engines]
        raise UnsupportedError(
            f"--format {fmt} cannot deploy {plan.engine} with connector '{plan.transfer.connector}' "
            f"(supported: {', '.join(supported)})",
            hint=hint,
        )


def require_engine(plan: Plan, platform: str, fmt: str, hint: str) -> None:
    """Refuse a plan ``platform`` cannot run: another engine, or a connector it cannot deploy."""
    if not exports_engine(plan, fmt):
        runs = " and ".join(e.title for e in ENGINE_SPECS.values() if fmt in e.exports)
        raise UnsupportedError(
            f"{platform} runs {runs}, this plan uses {plan.engine}",
            hint="use --engine vllm, or --format compose / systemd for SGLang",
        )
    require_connector(plan, fmt, hint)


def lmcache_in(mode: str) -> ConnectorSpec:
    """The connector that is LMCache in ``mode`` ("in-process", "mp": ConnectorSpec.lmcache_mode)."""
    return next(s for s in SPECS.values() if s.lmcache_mode == mode)


def pod_resources(plan: Plan) -> dict[str, dict[str, str]]:
    """A vLLM pod's requests and limits: an API server plus a busy worker per GPU rank on the host
    side, host memory for the CPU tier and the process, and the GPUs (requests equal to limits)."""
    tp = plan.parallel.tensor_parallel_size
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


def engine_image(
    plan: Plan, options: ExportOptions, connector: ConnectorSpec | None = None
) -> tuple[str, str, list[str]]:
    """(repository, tag, notes) of the image that runs the plan's engine with ``connector`` (by
    default the plan's): the one that ships the connector where the engine's own image does not."""
    if options.image:
        repo, sep, tag = options.image.rpartition(":")
        if not sep or "/" in tag:  # "host:5000/img" has a port, not a tag
            return options.image, "latest", []
        return repo, tag, []
    notes: list[str] = []
    engine = engine_spec(plan.engine)
    shipped = (connector or spec_of(plan.transfer.connector)).images.get(plan.engine)
    if shipped:
        repo, tag = shipped, "latest"
    else:
        repo = engine.image
        pinned = engine.image_tag and options.engine_version
        tag = engine.image_tag.format(version=options.engine_version) if pinned else "latest"
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
    return (cpu.size_bytes if cpu else 0) + HOST_BASE_BYTES_PER_RANK * plan.parallel.tensor_parallel_size


def lmcache_settings(plan: Plan, disk_dir: str | None, remote_url: str | None) -> dict[str, object]:
    """LMCache in-process keys (lmcache 0.5.6 v1/config.py; sizes in GiB PER TP RANK).

    The CPU tier stays on whenever disk or remote is on (``local_cpu: false`` with a disk tier
    asserts in some LMCache versions).
    """
    cfg: dict[str, object] = {
        "chunk_size": plan.cache.chunk_size,
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
    repo, tag, image_notes = engine_image(plan, options, lmcache_in("in-process"))
    notes += [*image_notes, *in_process_note(plan, platform)]
    return f"{repo}:{tag}", [*LMCACHE_CONNECTOR_ARGS], lmcache_env(plan, disk_dir)


def unsupervised_notes(plan: Plan, platform: str) -> list[str]:
    """What a platform that runs no kvstack process beside the engine cannot carry."""
    gate = (
        [
            f"kvstack's per-request gate (prompts under {plan.transfer.gate_prompt_tokens} tokens skip "
            f"the lookup) is not carried: {platform} runs no kvstack process beside the engine"
        ]
        if plan.transfer.gate_prompt_tokens
        else []
    )
    return [
        *gate,
        f"the KV canary is not exported for {platform}: run kvstack canary --url against the service",
    ]


def in_process_note(plan: Plan, platform: str) -> list[str]:
    """What an export that runs no LMCache server does with a plan for LMCache's server."""
    if spec_of(plan.transfer.connector).lmcache_mode != "mp":
        return []
    return [
        f"{platform} runs no LMCache server beside the engine: the plan's {plan.transfer.connector} tiers "
        "run as in-process LMCache (LMCacheConnectorV1) with the same sizes"
    ]


def vllm_kv_args(plan: Plan, disk_dir: str | None, with_lmcache_connector: bool = True) -> list[str]:
    """The KV-related vLLM arguments."""
    args = ["--kv-cache-dtype", plan.cache.kv_cache_dtype, *plan.dtype_args()]
    spec = spec_of(plan.transfer.connector)
    cpu = plan.tier("cpu")
    disk = plan.tier("disk")
    if spec.lmcache_mode == "in-process":
        if with_lmcache_connector:
            args += [*LMCACHE_CONNECTOR_ARGS]
    elif spec.builtin_flags and cpu is not None:  # vLLM's own offloading (OffloadingConnector)
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
            args += ["--kv-offloading-size", str(gib_floor(cpu.size_bytes)), *spec.builtin_flags]
    return args


def sglang_args(plan: Plan, disk_dir: str | None) -> tuple[list[str], dict[str, str]]:
    """SGLang arguments and environment."""
    args = [
        "--tp-size", str(plan.parallel.tensor_parallel_size),
        "--context-length", str(plan.model.max_model_len),
        "--kv-cache-dtype", plan.cache.kv_cache_dtype,
        *plan.dtype_args(),
        "--mem-fraction-static", str(plan.cache.gpu_memory_utilization),
        "--enable-metrics", "--enable-cache-report",
    ]  # fmt: skip
    env: dict[str, str] = {}
    cpu = plan.tier("cpu")
    disk = plan.tier("disk")
    builtin = spec_of(plan.transfer.connector).builtin_flags
    if builtin and cpu is not None:  # SGLang's own hierarchical cache (HiCache)
        # --hicache-size is decimal GB per rank (sglang memory_pool_host.py: hicache_size * 1e9).
        args += [
            *builtin,
            "--hicache-size", str(max(1, cpu.size_bytes_per_rank // 10**9)),
            "--hicache-write-policy", "write_through",
        ]  # fmt: skip
        if disk is not None and disk_dir:
            args += ["--page-size", "64", "--hicache-storage-backend", "file"]
            env["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] = disk_dir
            env["SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE"] = f"{max(1, disk.size_bytes // 10**9)}G"
    return args, env
