"""The flags that name a running server and its tiers (`validate`, `canary`) and the validation
pass's thresholds (`validate`, and `serve` after it starts), declared once; and the one function
that turns them into a ValidationTarget."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Self

from pydantic import model_validator

from kvstack.connectors import SPECS
from kvstack.errors import InputError
from kvstack.flags import Inputs, Json, flag
from kvstack.names import ENGINES, choice
from kvstack.validation.thresholds import (
    DEFAULT_MIN_SPEEDUP,
    DEFAULT_MIN_TIER_SPEEDUP,
    DEFAULT_NOISE_CEILING,
    DEFAULT_TOKENS,
    DEFAULT_TOP_K,
)

if TYPE_CHECKING:
    from kvstack.validation.report import ValidationTarget

TIERS = ("cpu", "disk", "remote")
MAX_CONCURRENCY = 256
_CONNECTORS = tuple(s.name for s in SPECS.values() if s.offloads)
# What a cache server given with --lmcache serves through (LMCache's: lmcache-mp).
_CACHE_SERVER = next(s.name for s in SPECS.values() if s.cache_server)


class ValidationInputs(Inputs):
    """The validation pass's prompt and pass marks."""

    prompt_tokens: Annotated[
        int | None,
        flag(
            "--prompt-tokens", help="Validation prompt length (default 4096, capped by the model's context)"
        ),
    ] = None
    min_speedup: Annotated[
        float, flag("--min-speedup", help="Warm TTFT must beat cold by this factor to pass")
    ] = DEFAULT_MIN_SPEEDUP
    min_tier_speedup: Annotated[
        float,
        flag(
            "--min-tier-speedup",
            help="Each tier step's TTFT must beat recomputing the same prompt by this factor",
        ),
    ] = DEFAULT_MIN_TIER_SPEEDUP


class ServerInputs(Inputs):
    """A running server and the tiers behind it, as `validate` and `canary` are told them."""

    url: Annotated[str, flag("--url", help="The server, e.g. http://127.0.0.1:8000")]
    engine: Annotated[
        str | None, flag("--engine", help="vllm or sglang (default: from /metrics)", choices=ENGINES)
    ] = None
    cache_dir: Annotated[
        Path | None, flag("--cache-dir", help="The disk tier's directory: adds a disk tier check")
    ] = None
    tiers: Annotated[list[str], flag("--tier", help="An offload tier to check: cpu, disk or remote")] = []  # noqa: RUF012 (pydantic copies it)
    lmcache: Annotated[
        str | None,
        flag(
            "--lmcache",
            help="LMCache's cache server HTTP address (lmcache server --http-port), e.g. "
            "http://127.0.0.1:8002: tiers are proven with its per-tier counters, disk and remote "
            "after emptying its DRAM tier",
            show_default=False,
        ),
    ] = None
    offload: Annotated[
        str | None,
        flag(
            "--offload",
            help=f"The connector behind the tiers ({', '.join(_CONNECTORS)}): how each tier step "
            f"drops the copies above its tier (default: {_CACHE_SERVER} with --lmcache, else unknown, "
            "and a disk step that cannot empty DRAM is named tier:cpu+disk)",
            show_default=False,
            choices=_CONNECTORS,
        ),
    ] = None
    chunk_tokens: Annotated[
        int | None,
        flag(
            "--chunk-tokens",
            help="The tiers' chunk size: a tier serves a prompt when its hits cover the full chunks less "
            "one (default per connector: LMCache 256)",
            show_default=False,
        ),
    ] = None
    model: Annotated[str | None, flag("--model", help="Served model name (default: from /v1/models)")] = None

    def target(self, remote: str | None, api_key: str | None, **fields: Any) -> ValidationTarget:
        """The server and its tiers as the flags name them; ``fields``: the rest of the target."""
        from kvstack.engines.lmcache import L2_ADAPTERS
        from kvstack.validation.report import TierTarget, ValidationTarget

        kinds: list[str] = []
        for t in self.tiers:
            choice(t, TIERS, "--tier")
            if t not in kinds:
                kinds.append(t)
        if self.cache_dir is not None and "disk" not in kinds:
            kinds.append("disk")
        secrets = [api_key] if api_key else []
        if remote is not None:
            from kvstack.remoteurl import parse_remote_url

            secrets += parse_remote_url(remote).secrets  # a malformed URL stops here (exit 2)
            if "remote" not in kinds:
                kinds.append("remote")
        if "disk" in kinds and self.cache_dir is None:
            raise InputError("--tier disk needs the disk tier's directory", hint="add --cache-dir DIR")
        disk_path = str(self.cache_dir.resolve()) if self.cache_dir is not None else None
        lmcache = self.lmcache
        return ValidationTarget(
            base_url=self.url,
            model=self.model,
            api_key=api_key or None,
            engine=self.engine,  # type: ignore[arg-type]
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
            metrics_urls=[self.url.rstrip("/") + "/metrics", lmcache.rstrip("/") + "/metrics"]
            if lmcache
            else [],
            connector=self.offload or (_CACHE_SERVER if lmcache else None),
            chunk_tokens=self.chunk_tokens,
            secrets=secrets,
            **fields,
        )


class ValidateInputs(Inputs):
    """``kvstack validate``'s own flags: how the pass is run against the server, and its report."""

    log: Annotated[Path | None, flag("--log", help="The engine's log file, scanned for silent failures")] = (
        None
    )
    repeat: Annotated[int, flag("--repeat", help="Rounds per step (the median is judged)")] = 3
    correctness_tokens: Annotated[
        int,
        flag(
            "--correctness-tokens",
            help="Greedy tokens of each cached answer that a recompute scores, every one judged "
            "(0: the correctness gate is off, and the summary says so)",
        ),
    ] = DEFAULT_TOKENS
    noise_ceiling: Annotated[
        float,
        flag(
            "--noise-ceiling",
            help="Nats: the correctness gate is set from the noise floor measured on the cold answers, "
            "and never above this",
        ),
    ] = DEFAULT_NOISE_CEILING
    top_k: Annotated[int, flag("--top-k", help="Recompute's candidates reported per scored position")] = (
        DEFAULT_TOP_K
    )
    reset_path: Annotated[
        str | None,
        flag("--reset-path", help="POST path that empties the GPU prefix cache (default per engine)"),
    ] = None
    as_json: Json
    out: Annotated[Path | None, flag("--out", help="Also write the JSON report to this file")] = None
    concurrency: Annotated[
        int,
        flag(
            "--concurrency",
            help="Requests in flight while the steps are judged (N-1 streams of fresh prompts beside them)",
        ),
    ] = 1

    @model_validator(mode="after")
    def _check(self) -> Self:
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise InputError(
                f"--concurrency must be between 1 and {MAX_CONCURRENCY}, not {self.concurrency}",
                hint="e.g. --concurrency 4",
            )
        return self

    def target_fields(self) -> dict[str, object]:
        """The ValidationTarget fields these flags set."""
        return {
            "reset_path": self.reset_path,
            "log_file": str(self.log) if self.log else None,
            "repeat": self.repeat,
            "correctness_tokens": self.correctness_tokens,
            "noise_ceiling": self.noise_ceiling,
            "top_k": self.top_k,
            "concurrency": self.concurrency,
        }
