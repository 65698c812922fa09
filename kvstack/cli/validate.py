"""`kvstack validate`: the TTFT validation pass against a running server."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from kvstack.apikey import ApiKeyInputs
from kvstack.cli.flags import command
from kvstack.errors import InputError
from kvstack.remote.source import RemoteInputs
from kvstack.validation.inputs import ServerInputs, ValidationInputs
from kvstack.validation.thresholds import DEFAULT_NOISE_CEILING, DEFAULT_TOKENS, DEFAULT_TOP_K

MAX_CONCURRENCY = 256


def register(app: typer.Typer) -> None:
    @command(app, "validate")
    def _cmd(
        server: ServerInputs,
        remote: RemoteInputs,
        key: ApiKeyInputs,
        checks: ValidationInputs,
        log: Path | None = typer.Option(
            None, "--log", help="The engine's log file, scanned for silent failures"
        ),
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
        from kvstack.validation import run_validation, write_report

        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise InputError(
                f"--concurrency must be between 1 and {MAX_CONCURRENCY}, not {concurrency}",
                hint="e.g. --concurrency 4",
            )
        target = server.target(
            remote.url(),  # --remote-file, --remote, KVSTACK_REMOTE_URL
            key.value(),
            reset_path=reset_path,
            log_file=str(log) if log else None,
            **checks.model_dump(),
            repeat=repeat,
            correctness_tokens=correctness_tokens,
            noise_ceiling=noise_ceiling,
            top_k=top_k,
            concurrency=concurrency,
        )
        from kvstack.rendering.validation import render_report, validating

        with validating(shown=not as_json and sys.stderr.isatty()) as on_progress:
            report = run_validation(target, on_progress=on_progress)
        if out is not None:
            write_report(report, out)
        render_report(report, as_json)
        raise typer.Exit(0 if report.overall == "PASS" else 1)
