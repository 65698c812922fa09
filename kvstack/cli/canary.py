"""`kvstack canary`: keep checking a running server's cached answers against recompute."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, cast

import typer

from kvstack.apikey import ApiKeyInputs
from kvstack.canary.defaults import OnWrongKv
from kvstack.canary.inputs import CanaryInputs
from kvstack.cli.flags import Pick, command
from kvstack.errors import InputError
from kvstack.names import choice
from kvstack.remote.source import RemoteInputs
from kvstack.validation.inputs import ServerInputs

WATCH_ACTIONS = ("warn", "stop")  # a server kvstack did not start cannot be restarted without its tiers

# The command is the canary: its interval and budget go without the prefix serve gives them.
WatchFlags = Annotated[
    CanaryInputs,
    Pick(
        without=("no_canary",),
        names={"canary_interval": ("--interval",), "canary_budget": ("--budget",)},
        help={
            "canary_interval": "Seconds between checks, at least (the budget may space them further).",
            "canary_budget": "The largest share of the engine's prefill the canary may take: 1%, 0.01.",
            "on_wrong_kv": "warn (say it, keep watching) or stop (exit 1)",
        },
        default={"on_wrong_kv": "warn"},
    ),
]


def register(app: typer.Typer) -> None:
    @command(app, "canary")
    def _cmd(
        server: ServerInputs,
        remote: RemoteInputs,
        key: ApiKeyInputs,
        canary: WatchFlags,
        probe_tokens: int | None = typer.Option(
            None, "--probe-tokens", help="Probe prompt length (default 1024, within the model's context)"
        ),
        metrics_host: str = typer.Option(
            "127.0.0.1", "--metrics-host", help="Bind address of /metrics (loopback by default)"
        ),
        no_metrics: bool = typer.Option(False, "--no-metrics", help="Serve no /metrics"),
        run_dir: Path | None = typer.Option(
            None, "--run-dir", help="Where canary.json and events.jsonl go (default: a new state dir)"
        ),
        checks: int = typer.Option(0, "--checks", help="Stop after this many checks (0: until stopped)"),
    ) -> None:
        """Ask planted probes again while the server serves; judge each answer against a recompute."""
        from kvstack.canary.watch import watch_server
        from kvstack.rendering.serve import serve_events

        action = cast(OnWrongKv, choice(canary.on_wrong_kv, WATCH_ACTIONS, "--on-wrong-kv"))
        if checks < 0:
            raise InputError(f"--checks must be 0 or more, not {checks}", hint="e.g. --checks 10")
        fields = canary.fields()
        target = server.target(remote.url(), key.value())
        metrics = None if no_metrics else (metrics_host, fields["metrics_port"], fields["metrics_token"])
        events = serve_events(json_mode=False)
        watch_server(
            target, fields, probe_tokens, action, run_dir, metrics, events.message, events.warning, checks
        )
