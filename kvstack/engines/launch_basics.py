"""What every renderer derives once per launch: the KV fingerprint, cache layout, URLs and secrets."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from kvstack.engines.base import RenderRequest
from kvstack.engines.fingerprint import KvIdentity, fingerprint, namespace
from kvstack.errors import InputError, PathError
from kvstack.netaddr import client_host, is_port
from kvstack.planning.schema import Tier, TierKind
from kvstack.redact import MASK, url_secrets
from kvstack.runtime.specs import FileSpec, LaunchSpec, ProcessSpec
from kvstack.units import GIB


@dataclass
class LaunchBasics:
    """Per-launch values derived once from the request; renderers add notes and secrets."""

    fingerprint: str
    cache_ns: str  # directory name below a cache root: "<model>-<fingerprint>"
    base_url: str
    served_model_name: str
    load_format: str | None  # value for the engine's --load-format; None: leave the default
    secrets: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    private_dirs: list[str] = field(default_factory=list)
    cache_dirs: dict[str, str] = field(default_factory=dict)


def _absolute(path: str, what: str) -> str:
    if not PurePosixPath(path).is_absolute():
        raise PathError(
            f"{what} must be an absolute path, not {path!r}",
            hint="give a full path (a leading ~ is not expanded by the engines)",
        )
    return str(PurePosixPath(path))


def prepare(
    req: RenderRequest,
    *,
    engine_version: str | None,
    connector_version: str | None,
    block_tokens: int,
) -> LaunchBasics:
    plan, options, facts = req.plan, req.options, req.facts
    _absolute(options.cache_root, "the cache directory")
    _absolute(options.run_dir, "the run directory")
    load_format = options.load_format
    notes: list[str] = []
    if load_format is None and facts.model_local and not facts.model_has_weights:
        load_format = "dummy"
    if load_format == "dummy":
        notes.append("dummy (random) weights: the model's output is noise; KV caching still works")
    identity = KvIdentity(
        # A hub id names different weights over time; its snapshot's commit pins them.
        model=plan.model.path if facts.model_commit is None else f"{plan.model.path}@{facts.model_commit}",
        weights="dummy" if load_format == "dummy" else "real",
        config_sha256=facts.model_config_sha256,
        model_dtype=plan.model.geometry.dtype,
        kv_cache_dtype=plan.cache.kv_cache_dtype,
        engine=plan.engine,
        engine_version=engine_version,
        connector=plan.transfer.connector,
        connector_version=connector_version,
        tensor_parallel_size=plan.parallel.tensor_parallel_size,
        block_tokens=block_tokens,
    )
    fp = fingerprint(identity)
    secrets = [s for s in (options.api_key, facts.hub_token) if s]
    return LaunchBasics(
        fingerprint=fp,
        cache_ns=namespace(plan.model.geometry.name, fp),
        base_url=f"http://{client_host(options.host)}:{options.port}",
        served_model_name=options.served_model_name or plan.model.geometry.name,
        load_format=load_format,
        secrets=secrets,
        notes=notes,
    )


def tier_dir(req: RenderRequest, prep: LaunchBasics, tier: Tier, label: str) -> str:
    """``<root>/<model>-<fp>/<label>``: root is the disk the plan measured, else the cache root."""
    root = _absolute(tier.path or req.options.cache_root, f"the {tier.kind} tier directory")
    path = str(PurePosixPath(root) / prep.cache_ns / label)
    prep.private_dirs.append(path)
    prep.cache_dirs[tier.kind] = path
    return path


def need_tier(req: RenderRequest, kind: TierKind) -> Tier | None:
    tier = req.plan.tier(kind)
    return tier if tier is not None and tier.size_bytes > 0 else None


def remote_url(req: RenderRequest, prep: LaunchBasics) -> str | None:
    """The remote store URL with its credentials; each of them (a password in the userinfo or in
    the query) becomes a secret.

    The plan decides whether there is a remote tier; options.remote_url only supplies the
    credentials that the plan (redacted) never holds.
    """
    tier = need_tier(req, "remote")
    if req.plan.transfer.remote_url is None and tier is None:
        return None
    url = req.options.remote_url or req.plan.transfer.remote_url or (tier.url if tier else None)
    if url is None:
        raise InputError(
            "the plan has a remote tier but no URL for it",
            hint="pass the store's URL with --remote redis://host:port",
        )
    secrets = url_secrets(url)
    if MASK in secrets:
        raise InputError(
            f"the remote store URL {url} has a redacted password",
            hint="pass the real URL with --remote (kvstack never stores the password in a plan)",
        )
    prep.secrets.extend(s for s in secrets if s not in prep.secrets)
    return url


def gib_floor(n_bytes: int) -> float:
    """Bytes as GiB rounded DOWN to 2 decimals (never promise more memory than planned)."""
    return math.floor(n_bytes / GIB * 100) / 100


def derived_port(base: int, offset: int, what: str) -> int:
    port = base + offset
    if not is_port(port):
        raise InputError(f"cannot derive the {what} port from --port {base}", hint="choose a lower --port")
    return port


def assemble(
    req: RenderRequest,
    prep: LaunchBasics,
    *,
    engine_version: str | None,
    connector_version: str | None,
    server: ProcessSpec,
    reset_cache_path: str | None,
    helpers: list[ProcessSpec] | None = None,
    files: list[FileSpec] | None = None,
    fresh_dirs: list[str] | None = None,
    helper_ports: list[int] | None = None,
    helper_metrics: list[str] | None = None,
    cache_server_url: str | None = None,
    tier_adapters: dict[str, str] | None = None,
) -> LaunchSpec:
    """The LaunchSpec every renderer returns, with the fields they all fill the same way."""
    return LaunchSpec(
        engine=req.plan.engine,
        connector=req.plan.transfer.connector,
        engine_version=engine_version,
        connector_version=connector_version,
        helpers=helpers or [],
        server=server,
        files=files or [],
        private_dirs=prep.private_dirs,
        fresh_dirs=fresh_dirs or [],
        ports=[req.options.port, *(helper_ports or [])],
        base_url=prep.base_url,
        served_model_name=prep.served_model_name,
        api_key_set=bool(req.options.api_key),
        reset_cache_path=reset_cache_path,
        metrics_urls=[f"{prep.base_url}/metrics", *(helper_metrics or [])],
        cache_server_url=cache_server_url,
        tier_adapters=tier_adapters or {},
        cache_dirs=prep.cache_dirs,
        fingerprint=prep.fingerprint,
        notes=prep.notes,
        secrets=prep.secrets,
    )
