"""`kvstack top`: a live view of running servers and of what each KV tier serves."""

from __future__ import annotations

from pathlib import Path

import typer

from kvstack.apikey import ApiKeyInputs
from kvstack.cli.flags import command
from kvstack.errors import InputError
from kvstack.remote.source import RemoteInputs

MIN_INTERVAL_S = 0.2


def register(app: typer.Typer) -> None:
    @command(app, "top")
    def _cmd(
        remote: RemoteInputs,
        api_key: ApiKeyInputs,
        urls: list[str] = typer.Option(
            [],
            "--url",
            help="A server to watch, e.g. http://127.0.0.1:8000 (repeatable; default: the run dir's)",
        ),
        lmcache: list[str] = typer.Option(
            [],
            "--lmcache",
            help="LMCache's cache server HTTP address (lmcache server --http-port), e.g. "
            "http://127.0.0.1:8002 (repeatable: one per --url, in the same order, or one shared)",
            show_default=False,
        ),
        run_dir: Path | None = typer.Option(
            None,
            "--run-dir",
            help="A kvstack serve run dir to read the URLs from (default: the latest run, without --url)",
        ),
        disk_dir: Path | None = typer.Option(
            None, "--disk-dir", help="The disk tier's directory (default: the run dir's)", show_default=False
        ),
        interval: float = typer.Option(2.0, "--interval", help="Seconds between scrapes: the window"),
        once: bool = typer.Option(
            False, "--once", help="One window (two scrapes --interval apart), then exit"
        ),
        as_json: bool = typer.Option(False, "--json", help="With --once: print the window as JSON"),
    ) -> None:
        """Watch servers and their KV tiers live: requests, TTFT, prompt tokens by source, tier hits."""
        from kvstack.rendering.top import print_window
        from kvstack.rendering.top_live import run_live
        from kvstack.top.live import snapshot_once
        from kvstack.top.targets import resolve_targets

        if not interval >= MIN_INTERVAL_S or interval > 3600:
            raise InputError(
                f"--interval must be between {MIN_INTERVAL_S} and 3600 seconds, not {interval:g}",
                hint="e.g. --interval 2",
            )
        if as_json and not once:
            raise InputError("--json prints one window: it needs --once", hint="kvstack top --once --json")
        key = api_key.value()
        targets = resolve_targets(urls, lmcache, remote.url(), run_dir, disk_dir)
        if once:
            print_window(snapshot_once(targets, interval, key), as_json)
        else:
            run_live(targets, interval, key)
