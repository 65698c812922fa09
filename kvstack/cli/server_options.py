"""The options that name a running server and its tiers, shared by `validate` and `canary`, and the
one function that turns them into a ValidationTarget (with their checks)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kvstack.errors import InputError
from kvstack.names import CONNECTORS, ENGINES, choice

if TYPE_CHECKING:
    from kvstack.validation import ValidationTarget

TIERS = ("cpu", "disk", "remote")
_CONNECTORS = tuple(c for c in CONNECTORS if c != "none")

Url = Annotated[str, typer.Option(..., "--url", help="The server, e.g. http://127.0.0.1:8000")]
EngineName = Annotated[str | None, typer.Option("--engine", help="vllm or sglang (default: from /metrics)")]
CacheDir = Annotated[
    Path | None, typer.Option("--cache-dir", help="The disk tier's directory: adds a disk tier check")
]
Tiers = Annotated[list[str], typer.Option("--tier", help="An offload tier to check: cpu, disk or remote")]
Lmcache = Annotated[
    str | None,
    typer.Option(
        "--lmcache",
        help="LMCache's cache server HTTP address (lmcache server --http-port), e.g. "
        "http://127.0.0.1:8002: tiers are proven with its per-tier counters, disk and remote "
        "after emptying its DRAM tier",
        show_default=False,
    ),
]
Offload = Annotated[
    str | None,
    typer.Option(
        "--offload",
        help="The connector behind the tiers (lmcache, lmcache-mp, native, hicache): how each tier "
        "step drops the copies above its tier (default: lmcache-mp with --lmcache, else unknown, and "
        "a disk step that cannot empty DRAM is named tier:cpu+disk)",
        show_default=False,
    ),
]
ChunkTokens = Annotated[
    int | None,
    typer.Option(
        "--chunk-tokens",
        help="The tiers' chunk size: a tier serves a prompt when its hits cover the full chunks less "
        "one (default per connector: LMCache 256)",
        show_default=False,
    ),
]
ServedModel = Annotated[
    str | None, typer.Option("--model", help="Served model name (default: from /v1/models)")
]


def server_target(
    url: str,
    engine: str | None,
    tiers: list[str],
    cache_dir: Path | None,
    lmcache: str | None,
    remote: str | None,
    api_key: str | None,
    offload: str | None,
    chunk_tokens: int | None,
    model: str | None,
    **fields: Any,
) -> ValidationTarget:
    """The server and its tiers as the flags name them; ``fields``: the rest of the target."""
    from kvstack.engines.lmcache import L2_ADAPTERS
    from kvstack.validation import TierTarget, ValidationTarget

    if offload is not None:
        choice(offload, _CONNECTORS, "--offload")
    if engine is not None:
        choice(engine, ENGINES, "--engine")
    kinds: list[str] = []
    for t in tiers:
        choice(t, TIERS, "--tier")
        if t not in kinds:
            kinds.append(t)
    if cache_dir is not None and "disk" not in kinds:
        kinds.append("disk")
    secrets = [api_key] if api_key else []
    if remote is not None:
        from kvstack.remote.url import parse_remote_url

        secrets += parse_remote_url(remote).secrets  # a malformed URL stops here (exit 2)
        if "remote" not in kinds:
            kinds.append("remote")
    if "disk" in kinds and cache_dir is None:
        raise InputError("--tier disk needs the disk tier's directory", hint="add --cache-dir DIR")
    disk_path = str(cache_dir.resolve()) if cache_dir is not None else None
    return ValidationTarget(
        base_url=url,
        model=model,
        api_key=api_key or None,
        engine=engine,  # type: ignore[arg-type]
        tiers=[
            TierTarget(
                kind=k,  # type: ignore[arg-type]
                path=disk_path if k == "disk" else None,
                url=remote if k == "remote" else None,
                adapter=L2_ADAPTERS.get(k) if lmcache else None,
            )
            for k in kinds
        ],
        cache_server_url=lmcache,
        metrics_urls=[url.rstrip("/") + "/metrics", lmcache.rstrip("/") + "/metrics"] if lmcache else [],
        connector=offload or ("lmcache-mp" if lmcache else None),
        chunk_tokens=chunk_tokens,
        secrets=secrets,
        **fields,
    )
