"""`kvstack top`: a live view of running servers and of what each KV tier serves."""

from __future__ import annotations

from typing import Annotated

import typer

from kvstack.apikey import ApiKeyInputs
from kvstack.cli.flags import Pick, command
from kvstack.remote.source import RemoteInputs
from kvstack.top.inputs import TopInputs

TopFlags = Annotated[TopInputs, Pick(help={"as_json": "With --once: print the window as JSON"})]


def register(app: typer.Typer) -> None:
    @command(app, "top")
    def _cmd(remote: RemoteInputs, api_key: ApiKeyInputs, top: TopFlags) -> None:
        """Watch servers and their KV tiers live: requests, TTFT, prompt tokens by source, tier hits."""
        from kvstack.rendering.top import print_window
        from kvstack.rendering.top_live import run_live
        from kvstack.top.live import snapshot_once
        from kvstack.top.targets import resolve_targets

        key = api_key.value()
        targets = resolve_targets(
            top.urls, top.lmcache, remote.url(), top.run_dir, top.disk_dir, capacity=top.capacity
        )
        if top.once:
            print_window(snapshot_once(targets, top.interval, key), top.as_json)
        else:
            run_live(targets, top.interval, key)
