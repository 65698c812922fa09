"""`kvstack canary`: keep checking a running server's cached answers against recompute."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from kvstack.canary.defaults import DEFAULT_INTERVAL_S
from kvstack.cli import canary_options as copt
from kvstack.cli import options as opt
from kvstack.cli import remote_options as ropt
from kvstack.cli import server_options as sopt
from kvstack.errors import InputError
from kvstack.names import choice

WATCH_ACTIONS = ("warn", "stop")  # a server kvstack did not start cannot be restarted without its tiers


def register(app: typer.Typer) -> None:
    @app.command("canary")
    def _cmd(
        url: sopt.Url,
        engine: sopt.EngineName = None,
        cache_dir: sopt.CacheDir = None,
        tiers: sopt.Tiers = [],  # noqa: B006 (typer's default, never mutated)
        remote: ropt.Remote = None,
        remote_file: ropt.RemoteFile = None,
        lmcache: sopt.Lmcache = None,
        offload: sopt.Offload = None,
        chunk_tokens: sopt.ChunkTokens = None,
        model: sopt.ServedModel = None,
        api_key: opt.ApiKey = None,
        api_key_file: opt.ApiKeyFile = None,
        probe_tokens: int | None = typer.Option(
            None, "--probe-tokens", help="Probe prompt length (default 1024, within the model's context)"
        ),
        interval: copt.Interval = DEFAULT_INTERVAL_S,
        budget: copt.Budget = copt.DEFAULTS["budget"],
        on_wrong_kv: str = typer.Option(
            "warn", "--on-wrong-kv", help="warn (say it, keep watching) or stop (exit 1)"
        ),
        metrics_host: str = typer.Option(
            "127.0.0.1", "--metrics-host", help="Bind address of /metrics (loopback by default)"
        ),
        metrics_port: copt.MetricsPort = 0,
        metrics_token_file: copt.MetricsTokenFile = None,
        no_metrics: bool = typer.Option(False, "--no-metrics", help="Serve no /metrics"),
        run_dir: Path | None = typer.Option(
            None, "--run-dir", help="Where canary.json and events.jsonl go (default: a new state dir)"
        ),
        checks: int = typer.Option(0, "--checks", help="Stop after this many checks (0: until stopped)"),
    ) -> None:
        """Ask planted probes again while the server serves; judge each answer against a recompute."""
        from rich.console import Console
        from rich.markup import escape

        from kvstack.apikey import resolve_api_key
        from kvstack.canary.checker import CanaryConfig
        from kvstack.canary.watch import watch
        from kvstack.remote.source import resolve_remote
        from kvstack.rundir import default_runs_root
        from kvstack.runtime.signals import StopOnSignal

        fields = copt.canary_fields(False, interval, budget, on_wrong_kv, metrics_port, metrics_token_file)
        action = choice(on_wrong_kv, WATCH_ACTIONS, "--on-wrong-kv")
        if checks < 0:
            raise InputError(f"--checks must be 0 or more, not {checks}", hint="e.g. --checks 10")
        target = sopt.server_target(
            url,
            engine,
            tiers,
            cache_dir,
            lmcache,
            resolve_remote(remote, remote_file),
            resolve_api_key(api_key, api_key_file).value,
            offload,
            chunk_tokens,
            model,
        )
        err = Console(stderr=True, highlight=False, soft_wrap=True)
        directory = run_dir or default_runs_root() / f"canary-{time.strftime('%Y%m%d-%H%M%S')}"
        signals = StopOnSignal(stop=lambda: None, hurry=lambda: None, stopping=lambda: False)
        signals.install()
        try:
            watch(
                target,
                CanaryConfig(
                    interval_s=fields["canary_interval_s"],
                    budget=fields["canary_budget"],
                    probe_tokens=probe_tokens,
                ),
                action,  # type: ignore[arg-type]
                directory.expanduser().absolute(),
                None if no_metrics else (metrics_host, metrics_port, fields["metrics_token"]),
                say=lambda m: err.print(escape(m)),
                warn=lambda m: err.print(f"[yellow]warning:[/yellow] {escape(m)}"),
                max_checks=checks,
            )
        finally:
            signals.restore()
