"""`kvstack validate`: the TTFT validation pass against a running server."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kvstack.cli import options as opt
from kvstack.cli import remote_options as ropt
from kvstack.cli import server_options as sopt
from kvstack.errors import InputError
from kvstack.validation.thresholds import (
    DEFAULT_MIN_SPEEDUP,
    DEFAULT_MIN_TIER_SPEEDUP,
    DEFAULT_NOISE_CEILING,
    DEFAULT_TOKENS,
    DEFAULT_TOP_K,
)

if TYPE_CHECKING:
    pass

MAX_CONCURRENCY = 256


def register(app: typer.Typer) -> None:
    @app.command("validate")
    def _cmd(
        url: sopt.Url,
        engine: sopt.EngineName = None,
        cache_dir: sopt.CacheDir = None,
        tiers: sopt.Tiers = [],  # noqa: B006 (typer's default, never mutated)
        remote: ropt.Remote = None,
        remote_file: ropt.RemoteFile = None,
        log: Path | None = typer.Option(
            None, "--log", help="The engine's log file, scanned for silent failures"
        ),
        lmcache: sopt.Lmcache = None,
        prompt_tokens: int | None = typer.Option(
            None, "--prompt-tokens", help="Prompt length (default 4096, capped by the model's context)"
        ),
        min_speedup: opt.MinSpeedup = DEFAULT_MIN_SPEEDUP,
        min_tier_speedup: opt.MinTierSpeedup = DEFAULT_MIN_TIER_SPEEDUP,
        offload: sopt.Offload = None,
        chunk_tokens: sopt.ChunkTokens = None,
        repeat: int = typer.Option(3, "--repeat", help="Rounds per step (the median is judged)"),
        correctness_tokens: int = typer.Option(
            DEFAULT_TOKENS,
            "--correctness-tokens",
            help="Greedy tokens of each cached answer that a recompute scores, every one judged "
            "(0: the correctness gate is off, and the summary says so)",
        ),
        noise_ceiling: float = typer.Option(
            DEFAULT_NOISE_CEILING,
            "--noise-ceiling",
            help="Nats: the correctness gate is set from the noise floor measured on the cold answers, "
            "and never above this",
        ),
        top_k: int = typer.Option(
            DEFAULT_TOP_K, "--top-k", help="Recompute's candidates reported per scored position"
        ),
        model: sopt.ServedModel = None,
        api_key: opt.ApiKey = None,
        api_key_file: opt.ApiKeyFile = None,
        reset_path: str | None = typer.Option(
            None, "--reset-path", help="POST path that empties the GPU prefix cache (default per engine)"
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the report as JSON"),
        out: Path | None = typer.Option(None, "--out", help="Also write the JSON report to this file"),
        concurrency: int = typer.Option(
            1,
            "--concurrency",
            help="Requests in flight while the steps are judged (N-1 streams of fresh prompts beside them)",
        ),
    ) -> None:
        """Prove with TTFT and the server's counters that the prefix cache and each tier serve hits."""
        from kvstack.apikey import resolve_api_key
        from kvstack.remote.source import resolve_remote
        from kvstack.validation import run_validation, write_report

        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise InputError(
                f"--concurrency must be between 1 and {MAX_CONCURRENCY}, not {concurrency}",
                hint="e.g. --concurrency 4",
            )
        api_key = resolve_api_key(api_key, api_key_file).value
        remote = resolve_remote(remote, remote_file)  # --remote-file, --remote, KVSTACK_REMOTE_URL
        target = sopt.server_target(
            url,
            engine,
            tiers,
            cache_dir,
            lmcache,
            remote,
            api_key,
            offload,
            chunk_tokens,
            model,
            reset_path=reset_path,
            log_file=str(log) if log else None,
            prompt_tokens=prompt_tokens,
            min_speedup=min_speedup,
            min_tier_speedup=min_tier_speedup,
            repeat=repeat,
            correctness_tokens=correctness_tokens,
            noise_ceiling=noise_ceiling,
            top_k=top_k,
            concurrency=concurrency,
        )
        if as_json or not sys.stderr.isatty():
            report = run_validation(target)
        else:
            from rich.console import Console

            with Console(stderr=True).status("validating ...") as status:
                report = run_validation(target, on_progress=lambda msg: status.update(f"validating: {msg}"))
        if out is not None:
            write_report(report, out)
        if as_json:
            sys.stdout.write(report.to_json() + "\n")
        else:
            from kvstack.rendering.validation import render

            render(report)
        raise typer.Exit(0 if report.overall == "PASS" else 1)
