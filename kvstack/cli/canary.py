"""`kvstack canary`: keep checking a running server's cached answers against recompute."""

from __future__ import annotations

from typing import Annotated, cast

import typer

from kvstack.apikey import ApiKeyInputs
from kvstack.canary.defaults import OnWrongKv
from kvstack.canary.inputs import CanaryInputs, WatchInputs
from kvstack.cli.flags import Pick, command
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
        watch: WatchInputs,
    ) -> None:
        """Ask planted probes again while the server serves; judge each answer against a recompute."""
        from kvstack.canary.watch import watch_server
        from kvstack.rendering.serve import serve_events

        action = cast(OnWrongKv, choice(canary.on_wrong_kv, WATCH_ACTIONS, "--on-wrong-kv"))
        fields = canary.fields()
        target = server.target(remote.url(), key.value())
        metrics = (
            None
            if watch.no_metrics
            else (watch.metrics_host, fields["metrics_port"], fields["metrics_token"])
        )
        events = serve_events(json_mode=False)
        watch_server(
            target,
            fields,
            watch.probe_tokens,
            action,
            watch.run_dir,
            metrics,
            events.message,
            events.warning,
            watch.checks,
        )
