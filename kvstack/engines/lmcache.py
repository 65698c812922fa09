"""LMCache with vLLM: in-process (LMCACHE_CONFIG_FILE) and multi-process (`lmcache server`).

Renders the plan's LMCache layouts: the in-process YAML config, or the cache server's argv (started
through engines/disk_bound.py and engines/lmcache_guard.py) and vLLM's LMCacheMPConnector config,
each tier at the size the plan gave it (issue 24). The keys, flags and units were read in lmcache
0.5.6: what each one means, where LMCache's code has it and what was measured with it are in
docs/measurements.md ("LMCache 0.5.6 as kvstack launches it"); how each tier's size is enforced, in
docs/decisions.md ("Every tier runs at its planned size").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import unquote

import yaml

from kvstack.connectors.engines import engine_spec
from kvstack.engines import versions
from kvstack.engines.base import RenderRequest, register
from kvstack.engines.launch_basics import (
    LaunchBasics,
    assemble,
    derived_port,
    gib_floor,
    need_tier,
    remote_url,
    tier_dir,
)
from kvstack.engines.lmcache_guard import SHM_FLAG, SHM_NAME  # the guard makes it kvstack-<its pid>
from kvstack.engines.vllm import prepare_vllm, reset_path, vllm_server
from kvstack.errors import NetworkTargetError, PathError, UnsupportedError
from kvstack.names import CONTROL_ENV
from kvstack.planning.stored_kv import object_groups_flag
from kvstack.remoteurl import RemoteURL, parse_remote_url
from kvstack.runtime.specs import FileSpec, LaunchSpec, ProcessSpec
from kvstack.units import GIB, fmt_bytes

LMCACHE_ENV_PREFIX = "LMCACHE_"
# The CPU buffer LMCache needs in front of a disk or remote tier when the plan has no CPU tier.
STAGING_BUFFER_GIB = 1.0
MP_HOST = "127.0.0.1"
MP_CONNECTOR_MODULE = "lmcache.integration.vllm.lmcache_mp_connector"
# kvstack's per-request gate over that connector (engines/lmcache_gate.py): prompts shorter than
# the plan's gate_prompt_tokens skip the lookup and the load.
MP_GATE_MODULE, MP_GATE_CONNECTOR = "kvstack.engines.lmcache_gate", "GatedLMCacheMPConnector"
MP_GATE_KEY = "kvstack.gate_prompt_tokens"
DEGRADED_NOTE = (
    "LMCache in-process without CUDA runs in degraded mode (recompute): no KV is offloaded on this "
    "platform (--offload lmcache-mp works there)"
)
# Lines after which the process can never serve (see ProcessSpec.fatal_patterns).
BIND_ERROR = r"Address already in use"
SERVER_FATAL = [r"No handler registered for operation \S+", BIND_ERROR]
ENGINE_MP_FATAL = [
    r"LMCache server did not respond to \S+ within",
    r"LMCache server is unhealthy",
    BIND_ERROR,
]
# L2 adapter names (their "type") for the tiers they hold.
FS_ADAPTER, RESP_ADAPTER = "fs_native", "resp"
MP_SERVER_NAME = "lmcache-server"  # the helper process that holds L1 and the L2 adapters
# LMCache's own L2 eviction (its EvictionConfig defaults, spelled out so a plan reader sees them).
DISK_EVICTION = {"eviction_policy": "LRU", "trigger_watermark": 0.8, "eviction_ratio": 0.2}
DISK_BOUND_MODULE = "kvstack.engines.disk_bound"
# `lmcache server` run by kvstack's launcher, which guards its HTTP API (engines/lmcache_guard.py).
GUARD_MODULE = "kvstack.engines.lmcache_guard"
L2_ADAPTERS = {"disk": FS_ADAPTER, "remote": RESP_ADAPTER}
# The fs adapters (lmcache 0.5.6, fs_l2_adapter._object_key_to_filename; fs_native's C++ connector
# writes the same names, seen on this machine) name each object file
# <model>@0x<kv_rank:08x>@<group hex>@<64-hex chunk hash>.data, with every "/" of the model name
# (vLLM's model_config.model: the --model path) spelled "-SEP-". A name over NAME_MAX fails every
# store with ENAMETOOLONG, and the disk tier stays empty without an error the engine reports.
NAME_MAX = 255
FS_NAME_SUFFIX = len("@0x01000100@") + 4 + len("@") + 64 + len(".data")  # 4: room for the group id


def fs_file_name_bytes(model_name: str) -> int:
    return len(model_name.replace("/", "-SEP-").encode()) + FS_NAME_SUFFIX


def check_fs_names(req: RenderRequest) -> None:
    """Refuse a disk tier whose file names the filesystem cannot hold."""
    name = req.facts.engine_model_name or req.plan.model.path
    length = fs_file_name_bytes(name)
    if length > NAME_MAX:
        raise PathError(
            f"LMCache's disk tier names each file after the model path ({name}): with it the names are "
            f"{length} bytes, over the filesystem's {NAME_MAX}, so every store would fail and the disk "
            "tier would stay empty",
            hint=f"serve the model from a shorter path (e.g. ln -s {name} /srv/model and --model "
            "/srv/model), or drop the disk tier with --no-disk",
        )


def check_lmcache(req: RenderRequest, minimum: str, feature: str, *, cpu_works: bool = False) -> list[str]:
    notes = versions.require(req.software, "lmcache", req.software.lmcache, minimum, feature)
    if req.plan.platform != "cuda" and not cpu_works:
        notes.append(DEGRADED_NOTE)
    return notes


def no_tier_error(req: RenderRequest) -> UnsupportedError:
    return UnsupportedError(
        f"--offload {req.plan.transfer.connector} needs a CPU, disk or remote tier, but the plan has none",
        hint="use --offload none, or give the plan room for a CPU tier",
    )


def in_process_config(req: RenderRequest, prep: LaunchBasics) -> dict[str, Any]:
    """The LMCACHE_CONFIG_FILE content: only keys lmcache.v1.config knows."""
    cpu, disk = need_tier(req, "cpu"), need_tier(req, "disk")
    url = remote_url(req, prep)
    if cpu is None and disk is None and url is None:
        raise no_tier_error(req)
    cfg: dict[str, Any] = {"chunk_size": req.plan.cache.chunk_size, "local_cpu": True}
    if cpu is not None:
        cfg["max_local_cpu_size"] = gib_floor(cpu.size_bytes_per_rank)
        if cfg["max_local_cpu_size"] <= 0:
            raise UnsupportedError(
                f"the CPU tier ({cpu.size_bytes_per_rank} bytes per rank) is below LMCache's 0.01 GiB step",
                hint="give the plan a larger CPU tier or use --offload none",
            )
    else:
        cfg["max_local_cpu_size"] = STAGING_BUFFER_GIB
        prep.notes.append(
            f"no CPU tier planned: LMCache gets a {STAGING_BUFFER_GIB:g} GiB per-rank staging buffer"
        )
    if disk is not None:
        size = gib_floor(disk.size_bytes_per_rank)
        if size <= 0:
            raise UnsupportedError(
                f"the disk tier ({disk.size_bytes_per_rank} bytes per rank) is too small for LMCache",
                hint="give the disk tier at least 0.01 GiB per rank, or drop it",
            )
        # A plain absolute path: LMCache strips an optional file:// itself (_parse_local_disk).
        cfg["local_disk"] = tier_dir(req, prep, disk, "lmcache-disk") + "/"
        cfg["max_local_disk_size"] = size
    if url is not None:
        cfg["remote_url"] = url
        cfg["remote_serde"] = "naive"
    cfg["pre_caching_hash_algorithm"] = versions.LMCACHE_HASH_ALGORITHM
    return cfg


def yaml_file(path: str, content: dict[str, Any]) -> FileSpec:
    header = "# written by kvstack; LMCACHE_* variables are cleared so this file is what LMCache uses\n"
    return FileSpec(path=path, content=header + yaml.safe_dump(content, sort_keys=False), mode=0o600)


def prometheus_dir(req: RenderRequest) -> str:
    return str(PurePosixPath(req.options.run_dir) / "prometheus")


@register("vllm", "lmcache")
def render_vllm_lmcache(req: RenderRequest) -> LaunchSpec:
    lmc_notes = check_lmcache(req, versions.MIN_LMCACHE, "LMCache in-process")
    prep = prepare_vllm(req, connector_version=req.software.lmcache, block_tokens=req.plan.cache.chunk_size)
    prep.notes += lmc_notes
    config_path = str(PurePosixPath(req.options.run_dir) / "lmcache.yaml")
    config = in_process_config(req, prep)
    prom = prometheus_dir(req)
    server = vllm_server(
        req,
        prep,
        kv_transfer_config={"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"},
        env={
            "LMCACHE_CONFIG_FILE": config_path,
            # LMCache's counters live in the engine-core processes; vLLM's /metrics collects
            # them only from a PROMETHEUS_MULTIPROC_DIR that the API server shares
            # (vllm/v1/metrics/prometheus.py; lmcache/observability.py defaults to
            # /tmp/lmcache_prometheus, which the API server does not read).
            "PROMETHEUS_MULTIPROC_DIR": prom,
        },
        unset_env_prefixes=[LMCACHE_ENV_PREFIX],
    )
    return _assemble_vllm_lmcache(
        req,
        prep,
        server,
        files=[yaml_file(config_path, config)],
        fresh_dirs=[prom],
    )


def _assemble_vllm_lmcache(
    req: RenderRequest, prep: LaunchBasics, server: ProcessSpec, **rest: Any
) -> LaunchSpec:
    """The LaunchSpec of vLLM with LMCache (either mode): versions and the reset route said once."""
    return assemble(
        req,
        prep,
        engine_version=req.software.vllm,
        connector_version=req.software.lmcache,
        server=server,
        reset_cache_path=reset_path(req),
        **rest,
    )


# --- multi-process mode ---------------------------------------------------------------------


@dataclass(frozen=True)
class MpServer:
    process: ProcessSpec
    port: int
    http_port: int
    tier_adapters: dict[str, str]

    @property
    def http_url(self) -> str:
        return f"http://{MP_HOST}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.http_url}/metrics"


def resp_adapter(url: RemoteURL, req: RenderRequest, env: dict[str, str]) -> dict[str, Any]:
    """LMCache's "resp" L2 adapter for a redis:// URL (parsed once, kvstack/remoteurl.py);
    credentials go to the helper's env."""
    if url.scheme != "redis" or len(url.hosts) != 1 or url.db not in (None, 0) or url.query:
        raise NetworkTargetError(
            "LMCache's multi-process server reaches Redis only as redis://[user:pass@]host:port "
            f"(database 0, no TLS), not {url.redacted()}",
            hint="use a plain redis:// URL, or --offload lmcache (in-process) for other schemes",
        )
    adapter: dict[str, Any] = {"type": "resp", "host": url.host, "port": url.port}
    if url.username:
        env["LMCACHE_RESP_USERNAME"] = unquote(url.username)
    if url.password:
        env["LMCACHE_RESP_PASSWORD"] = unquote(url.password)
    remote = need_tier(req, "remote")
    if remote is not None:
        adapter["max_capacity_gb"] = gib_floor(remote.size_bytes)
    return adapter


def shm_transport(l1_bytes: float, shm_free_bytes: int | None) -> tuple[list[str], str]:
    """The CPU platform's KV transport between vLLM's worker and LMCache's server: the L1 pool in
    /dev/shm where it fits (LMCache checks again at start and falls back to pickle), else pickle."""
    if shm_free_bytes is not None and shm_free_bytes < l1_bytes:
        return [], (
            f"LMCache moves KV by pickle over its socket: /dev/shm has {fmt_bytes(shm_free_bytes)} free, "
            f"less than the {fmt_bytes(l1_bytes)} DRAM tier; enlarge /dev/shm (docker --shm-size) to "
            "put the tier there, about half the time of a DRAM hit here (docs/measurements.md)"
        )
    return [SHM_FLAG, SHM_NAME], (
        f"LMCache's DRAM tier ({fmt_bytes(l1_bytes)}) is a shared-memory pool in /dev/shm that vLLM's "
        "worker copies to and from directly (no pickle over the socket)"
    )


def mp_server(req: RenderRequest, prep: LaunchBasics) -> MpServer:
    """The supervised `lmcache server` holding L1 (CPU) and the L2 adapters (disk, Redis)."""
    options = req.options
    port = options.lmcache_port or derived_port(options.port, 1, "LMCache server")
    http_port = options.lmcache_http_port or derived_port(options.port, 2, "LMCache HTTP")
    if len({options.port, port, http_port}) < 3:
        raise NetworkTargetError(
            f"the engine ({options.port}), LMCache server ({port}) and LMCache HTTP ({http_port}) "
            "ports must differ",
            hint="choose distinct ports",
        )
    cpu, disk = need_tier(req, "cpu"), need_tier(req, "disk")
    url = remote_url(req, prep)
    if cpu is None and disk is None and url is None:
        raise no_tier_error(req)
    if cpu is not None:
        l1 = gib_floor(cpu.size_bytes)  # one server holds L1 for every TP rank
    else:
        l1 = STAGING_BUFFER_GIB
        prep.notes.append(f"no CPU tier planned: the LMCache server gets a {l1:g} GiB L1 staging buffer")
    env: dict[str, str] = {}
    if options.control_token:
        # Its HTTP API answers only this token on its control routes (engines/lmcache_guard.py).
        env[CONTROL_ENV] = options.control_token
        if options.control_token not in prep.secrets:
            prep.secrets.append(options.control_token)
    argv = [
        options.python, "-m", GUARD_MODULE, "server",
        "--host", MP_HOST,
        "--port", str(port),
        "--chunk-size", str(req.plan.cache.chunk_size),
        "--l1-size-gb", f"{l1:g}",
        "--eviction-policy", "LRU",
    ]  # fmt: skip
    plan = req.plan
    if flag := object_groups_flag(
        plan.model.geometry, plan.transfer.connector, plan.platform, plan.cache.hybrid_manager != "off"
    ):
        argv.append(flag)
    if req.plan.platform == "cpu":
        argv += ["--supported-transfer-mode", "auto"]  # the CPU adapter is engine-driven
        if engine_spec(req.plan.engine).lmcache_shm_transport:  # the path measured here
            shm, note = shm_transport(l1 * GIB, req.facts.shm_free_bytes)
            argv += shm
            prep.notes.append(note)
    adapters: dict[str, str] = {}
    disk_dir: str | None = None
    if disk is not None:
        check_fs_names(req)
        adapters["disk"] = FS_ADAPTER
        disk_dir = tier_dir(req, prep, disk, "lmcache-mp-disk")
        adapter = {
            "type": FS_ADAPTER,
            "base_path": disk_dir,
            "max_capacity_gb": disk.size_bytes / GIB,  # the launcher lowers it by what earlier runs left
            "eviction": DISK_EVICTION,
        }
        argv += ["--l2-adapter", json.dumps(adapter, separators=(",", ":"))]
    if url is not None:
        adapters["remote"] = RESP_ADAPTER
        argv += [
            "--l2-adapter",
            json.dumps(
                resp_adapter(req.options.remote or parse_remote_url(url), req, env), separators=(",", ":")
            ),
        ]
    argv += ["--http-host", MP_HOST, "--http-port", str(http_port)]
    if disk is not None and disk_dir is not None:
        bound = [
            options.python,
            "-m",
            DISK_BOUND_MODULE,
            "--dir",
            disk_dir,
            "--cap-bytes",
            str(disk.size_bytes),
        ]
        argv = [*bound, "--", *argv]
    process = ProcessSpec(
        name=MP_SERVER_NAME,
        argv=argv,
        env=env,
        unset_env_prefixes=[LMCACHE_ENV_PREFIX],
        ready_url=f"http://{MP_HOST}:{http_port}/healthcheck",
        fatal_patterns=SERVER_FATAL,
        critical=True,
    )
    return MpServer(process=process, port=port, http_port=http_port, tier_adapters=adapters)


def mp_connector_config(port: int, gate_prompt_tokens: int | None = None) -> dict[str, Any]:
    """The engine's --kv-transfer-config for LMCache's server on ``port``; with a gate, kvstack's
    GatedLMCacheMPConnector (the same connector, prompts shorter than the gate kept off it)."""
    # "tcp://" spelled out: vLLM's builtin fallback connector joins host and port without
    # adding a scheme (vllm/.../lmcache_mp_connector.py), LMCache's own adds it when missing.
    extra: dict[str, Any] = {"lmcache.mp.host": f"tcp://{MP_HOST}", "lmcache.mp.port": port}
    connector, module = "LMCacheMPConnector", MP_CONNECTOR_MODULE
    if gate_prompt_tokens:
        extra[MP_GATE_KEY] = gate_prompt_tokens
        connector, module = MP_GATE_CONNECTOR, MP_GATE_MODULE
    return {
        "kv_connector": connector,
        "kv_connector_module_path": module,
        "kv_role": "kv_both",
        "kv_connector_extra_config": extra,
    }


@register("vllm", "lmcache-mp")
def render_vllm_lmcache_mp(req: RenderRequest) -> LaunchSpec:
    lmc_notes = check_lmcache(req, versions.MIN_LMCACHE_MP, "LMCache multi-process mode", cpu_works=True)
    prep = prepare_vllm(req, connector_version=req.software.lmcache, block_tokens=req.plan.cache.chunk_size)
    prep.notes += lmc_notes
    helper = mp_server(req, prep)
    server = vllm_server(
        req,
        prep,
        kv_transfer_config=mp_connector_config(helper.port, req.plan.transfer.gate_prompt_tokens),
        unset_env_prefixes=[LMCACHE_ENV_PREFIX],
    )
    server.fatal_patterns = ENGINE_MP_FATAL  # vllm_server built it fresh: set in place
    # vLLM's adapter waits for the cache server (lmcache.mp.mq_timeout, 300 s) where its connector
    # first asks it, ~16 s into the engine's start here: the server's 6.5 s start overlaps it.
    cache_server = helper.process.model_copy()
    cache_server.starts_with_server = True
    return _assemble_vllm_lmcache(
        req,
        prep,
        server,
        helpers=[cache_server],
        helper_ports=[helper.port, helper.http_port],
        helper_metrics=[helper.metrics_url],
        cache_server_url=helper.http_url,
        tier_adapters=helper.tier_adapters,
    )
