"""SGLang: plain radix cache, HiCache (host memory + file storage), or LMCache (MP mode).

Flags read in sglang 0.5.23 (sglang/srt/arg_groups/fields/*.py and its hooks):
- --hicache-size is whole GB (int; ``host_size * 1e9`` bytes in mem_cache/pool_host/base.py)
  for EACH rank's host pool and overrides --hicache-ratio.
- the file storage backend takes its directory from SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR and
  its LRU cap from SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE (bytes or SI/IEC suffixes; per rank, or
  shared by all ranks for MLA models: mem_cache/storage/file/lru_file_evictor.py).
- refused by SGLang's own checks (arg_groups/kv_cache_hook.py): --enable-hierarchical-cache with
  --disable-radix-cache, and --enable-lmcache with --enable-hierarchical-cache or without radix.
- --enable-lmcache runs LMCache's multi-process connector configured by --lmcache-config-file
  (mp_host/mp_port; mem_cache/storage/lmcache/README.md); that loader also applies LMCACHE_*
  environment overrides, so they are cleared.
- the API key: SGLang reads it from --api-key only (no environment variable), or from a YAML
  --config file that prepare_server_args merges into its arguments in-process
  (srt/server_args.py, utils/server_args_config_parser.py). kvstack writes that file (0600, in
  the 0700 run dir) so that the key never reaches the command line. With --api-key every route
  but /health*, /ready* and /metrics needs the key (utils/auth.py); without it, all are open,
  the admin ones (/flush_cache, /update_weights_from_disk, /release_memory_occupation, ...,
  AuthLevel.ADMIN_OPTIONAL) included. --admin-api-key (also read from that YAML) moves those to a
  second key and refuses --api-key there: kvstack sets the run's control token (kvstack/clients/
  control.py) as that key on every bind, so they answer kvstack only, loopback or not, key or not.
"""

from __future__ import annotations

import math
import secrets
from pathlib import PurePosixPath

import yaml

from kvstack.engines import versions
from kvstack.engines.base import RenderRequest, register, warns
from kvstack.engines.launch_basics import LaunchBasics, assemble, need_tier, prepare, tier_dir
from kvstack.engines.lmcache import LMCACHE_ENV_PREFIX, MP_HOST, check_lmcache, mp_server, yaml_file
from kvstack.engines.owned_flags import flag_name, refuse_owned_flags
from kvstack.errors import UnsupportedError
from kvstack.hardware.snapshot import SoftwareInfo
from kvstack.netaddr import is_loopback
from kvstack.releases import at_least
from kvstack.runtime.specs import FileSpec, LaunchSpec, ProcessSpec

SGLANG_RESET_PATH = "/flush_cache"
# HiCache storage works in pages; 64 is what SGLang's HiCache guides use with a storage backend.
PAGE_SIZE = 64
GB = 1_000_000_000  # SGLang's --hicache-size unit
# --config (a YAML of arguments) and --admin-api-key: read in sglang 0.5.23.
MIN_SGLANG_CONFIG = "0.5.23"
AUTH_CONFIG = "sglang-auth.yaml"
# The admin routes an open SGLang serves to anyone who reaches it (utils/auth.py ADMIN_OPTIONAL).
ADMIN_ROUTES = (
    "/flush_cache",
    "/update_weights_from_disk",
    "/release_memory_occupation",
    "/start_profile",
    "/configure_logging",
    "/load_lora_adapter",
)
RADIX_OFF_FLAGS = ("--disable-radix-cache",)
HICACHE_FLAGS = ("--enable-hierarchical-cache", "--enable-hicache")


def check_sglang(req: RenderRequest) -> list[str]:
    sw = req.software
    return versions.require(sw, "sglang", sw.sglang, versions.MIN_SGLANG, "serving with SGLang")


def check_extra_args(req: RenderRequest, *, hicache: bool, lmcache: bool) -> None:
    """Refuse the combinations SGLang itself rejects at start-up, before a long launch."""
    refuse_owned_flags(req.options.extra_args)
    extra = {n for n in map(flag_name, req.options.extra_args) if n is not None}
    if (hicache or lmcache) and extra & set(RADIX_OFF_FLAGS):
        what = "HiCache" if hicache else "LMCache"
        raise UnsupportedError(
            f"SGLang refuses {what} with --disable-radix-cache",
            hint="drop --disable-radix-cache from the extra arguments, or use --offload none",
        )
    if lmcache and extra & set(HICACHE_FLAGS):
        raise UnsupportedError(
            "SGLang refuses --enable-lmcache together with --enable-hierarchical-cache",
            hint="choose one: --offload hicache or --offload lmcache-mp",
        )
    if not hicache and not lmcache and extra & set(HICACHE_FLAGS):
        raise UnsupportedError(
            "--enable-hierarchical-cache in the extra arguments bypasses kvstack's sizing",
            hint="use --offload hicache instead",
        )


def takes_config_file(version: str | None) -> bool:
    """This SGLang takes --config (None, not installed: render for the newest verified one)."""
    return version is None or at_least(version, MIN_SGLANG_CONFIG)


def uses_config_file(req: RenderRequest) -> bool:
    return takes_config_file(req.software.sglang)


def open_admin_warning(version: str | None) -> str | None:
    """What an SGLang too old for --config leaves open on a loopback bind (on any other bind it is
    refused), said as a warning by serve; None when its admin routes are locked to kvstack."""
    if takes_config_file(version):
        return None
    return (
        f"sglang {version} takes an admin key only on its command line: its admin endpoints "
        f"({', '.join(ADMIN_ROUTES)}, ...) stay open to every local user on this machine; "
        f"sglang >= {MIN_SGLANG_CONFIG} locks them to kvstack"
    )


@warns("sglang")
def _open_admin(software: SoftwareInfo) -> str | None:
    return open_admin_warning(software.sglang)


def auth(req: RenderRequest, prep: LaunchBasics) -> tuple[list[str], list[FileSpec]]:
    """The arguments and files that give SGLang its keys, outside its command line when it can."""
    options = req.options
    keys: dict[str, str] = {}
    if options.api_key:
        keys["api-key"] = options.api_key
    public = not is_loopback(options.host)
    if not uses_config_file(req):
        # Before --config, a key could be given only on the command line (every local user reads
        # it in ps), and the admin routes could not be locked on a public bind.
        if options.api_key:
            raise UnsupportedError(
                f"sglang {req.software.sglang} takes an API key only on its command line, where every "
                "local user can read it",
                hint=f"upgrade to sglang >= {MIN_SGLANG_CONFIG} (it reads the key from a 0600 file), "
                "or serve it on loopback without a key",
            )
        if public:
            raise UnsupportedError(
                f"sglang {req.software.sglang} on --host {options.host} would leave its admin endpoints "
                f"({', '.join(ADMIN_ROUTES)}, ...) open to anyone who reaches it",
                hint=f"upgrade to sglang >= {MIN_SGLANG_CONFIG} (kvstack locks them), "
                "or keep --host on loopback",
            )
        warning = open_admin_warning(req.software.sglang)
        if options.control_token and warning is not None:
            prep.notes.append(warning)  # recorded in launch.json; serve says it as a warning
        return [], []
    if options.control_token:
        # The run's control token is SGLang's admin key: its admin routes answer only a bearer of
        # it (kvstack: the token is 0600 in the run dir), not the API key, on loopback too.
        keys["admin-api-key"] = options.control_token
        prep.notes.append(
            f"SGLang's admin endpoints ({', '.join(ADMIN_ROUTES)}, ...) answer kvstack only: "
            "the run's control token is their admin key"
        )
    elif public:
        # Nobody knows this key: SGLang's admin routes answer 401 to every client, key or not.
        keys["admin-api-key"] = secrets.token_urlsafe(32)
        prep.notes.append(
            f"SGLang's admin endpoints ({', '.join(ADMIN_ROUTES)}, ...) are locked with a random "
            f"admin key (--host {options.host} is not loopback)"
        )
    if not keys:
        return [], []
    prep.secrets.extend(v for v in keys.values() if v not in prep.secrets)
    path = str(PurePosixPath(options.run_dir) / AUTH_CONFIG)
    return ["--config", path], [FileSpec(path=path, content=yaml.safe_dump(keys, sort_keys=True))]


def reset_path(req: RenderRequest) -> str | None:
    """/flush_cache only on a loopback bind: elsewhere SGLang's admin routes are locked (auth)."""
    return SGLANG_RESET_PATH if is_loopback(req.options.host) else None


def sglang_server(
    req: RenderRequest, prep: LaunchBasics, extra: list[str], env: dict[str, str]
) -> ProcessSpec:
    plan, options = req.plan, req.options
    argv = [
        options.python, "-m", "sglang.launch_server",
        "--model-path", plan.model.path,
        "--host", options.host,
        "--port", str(options.port),
        "--served-model-name", prep.served_model_name,
        "--tp-size", str(plan.parallel.tensor_parallel_size),
        "--kv-cache-dtype", plan.cache.kv_cache_dtype,
        *plan.dtype_args(),
        "--context-length", str(plan.model.max_model_len),
        "--page-size", str(PAGE_SIZE),
        "--enable-metrics",
        "--enable-cache-report",
    ]  # fmt: skip
    if plan.model.revision is not None:
        argv += ["--revision", plan.model.revision]
    if plan.platform == "cuda":
        # The planner's share of GPU memory for weights + KV pool: SGLang's static fraction.
        argv += ["--mem-fraction-static", f"{plan.cache.gpu_memory_utilization:g}"]
    if prep.load_format is not None:
        argv += ["--load-format", prep.load_format]
    auth_args, auth_files = auth(req, prep)
    argv += auth_args  # --config FILE, a start file: on disk only until SGLang is ready
    argv += extra + options.extra_args
    return ProcessSpec(
        name="engine",
        argv=argv,
        env=env,
        unset_env=["KVSTACK_API_KEY"],  # kvstack's variable: the engine has its key
        unset_env_prefixes=[LMCACHE_ENV_PREFIX] if "--enable-lmcache" in extra else [],
        ready_url=f"{prep.base_url}/health",
        start_files=auth_files,
    )


def _prepare(req: RenderRequest, connector_version: str | None) -> LaunchBasics:
    notes = check_sglang(req)
    prep = prepare(
        req, engine_version=req.software.sglang, connector_version=connector_version, block_tokens=PAGE_SIZE
    )
    prep.notes[:0] = notes
    return prep


def sglang_launch(
    req: RenderRequest, prep: LaunchBasics, extra: list[str], env: dict[str, str]
) -> LaunchSpec:
    """SGLang's server with ``extra`` arguments and ``env``, and no connector of its own."""
    return assemble(
        req,
        prep,
        engine_version=req.software.sglang,
        connector_version=None,
        server=sglang_server(req, prep, extra, env),
        reset_cache_path=reset_path(req),
    )


@register("sglang", "none")
def render_sglang(req: RenderRequest) -> LaunchSpec:
    check_extra_args(req, hicache=False, lmcache=False)
    prep = _prepare(req, None)
    return sglang_launch(req, prep, [], {})


def hicache_host_args(req: RenderRequest) -> list[str]:
    """Host pool per rank: --hicache-size in whole GB, else a ratio of the device pool (> 1)."""
    cpu, gpu = need_tier(req, "cpu"), need_tier(req, "gpu")
    if cpu is None:
        raise UnsupportedError(
            "SGLang HiCache needs a host (CPU) tier, but the plan has none",
            hint="give the plan room for a CPU tier, or use --offload none",
        )
    size_gb = cpu.size_bytes_per_rank // GB
    if size_gb >= 1:
        return ["--hicache-size", str(size_gb)]
    if gpu is not None and gpu.size_bytes_per_rank > 0:
        ratio = math.floor(cpu.size_bytes_per_rank / gpu.size_bytes_per_rank * 100) / 100
        if ratio > 1:
            return ["--hicache-ratio", f"{ratio:g}"]
    raise UnsupportedError(
        f"the CPU tier ({cpu.size_bytes_per_rank} bytes per rank) is below 1 GB and not larger than "
        "the GPU pool: SGLang HiCache cannot size a host pool from it",
        hint="give the plan a larger CPU tier or use --offload none",
    )


@register("sglang", "hicache")
def render_sglang_hicache(req: RenderRequest) -> LaunchSpec:
    check_extra_args(req, hicache=True, lmcache=False)
    prep = _prepare(req, None)
    if need_tier(req, "remote") is not None or req.plan.transfer.remote_url:
        raise UnsupportedError(
            "SGLang HiCache has no Redis storage backend",
            hint="drop --remote, or use --engine vllm --offload lmcache for a Redis tier",
        )
    extra = ["--enable-hierarchical-cache", *hicache_host_args(req)]
    extra += ["--hicache-write-policy", "write_through"]
    env: dict[str, str] = {}
    disk = need_tier(req, "disk")
    if disk is not None:
        extra += ["--hicache-storage-backend", "file"]
        env["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] = tier_dir(req, prep, disk, "hicache-disk")
        # MLA models share one set of files across ranks; others write a set per rank.
        cap = disk.size_bytes if req.plan.model.geometry.attention == "mla" else disk.size_bytes_per_rank
        env["SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE"] = str(cap)
    return sglang_launch(req, prep, extra, env)


@register("sglang", "lmcache")
def render_sglang_lmcache(req: RenderRequest) -> LaunchSpec:
    raise UnsupportedError(
        "SGLang runs LMCache only in multi-process mode (sglang >= "
        f"{versions.MIN_SGLANG_LMCACHE}; installed: {versions.installed_versions(req.software)})",
        hint="use --offload lmcache-mp with --engine sglang",
    )


@register("sglang", "lmcache-mp")
def render_sglang_lmcache_mp(req: RenderRequest) -> LaunchSpec:
    check_extra_args(req, hicache=False, lmcache=True)
    sw = req.software
    notes = versions.require(
        sw, "sglang", sw.sglang, versions.MIN_SGLANG_LMCACHE, "LMCache with SGLang (--lmcache-config-file)"
    )
    notes += check_lmcache(req, versions.MIN_LMCACHE_MP, "LMCache multi-process mode")
    prep = _prepare(req, sw.lmcache)
    prep.notes += notes
    helper = mp_server(req, prep)
    config_path = str(PurePosixPath(req.options.run_dir) / "lmcache-mp.yaml")
    config = {"mp_host": MP_HOST, "mp_port": helper.port}
    extra = ["--enable-lmcache", "--lmcache-config-file", config_path]
    server = sglang_server(req, prep, extra, {})
    return assemble(
        req,
        prep,
        engine_version=sw.sglang,
        connector_version=sw.lmcache,
        server=server,
        reset_cache_path=reset_path(req),
        helpers=[helper.process],
        files=[yaml_file(config_path, config)],
        helper_ports=[helper.port, helper.http_port],
        helper_metrics=[helper.metrics_url],
    )
