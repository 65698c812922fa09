"""`kvstack serve`'s output: the event lines on standard error while it starts, validates and serves,
and the dry run's plan, commands and files."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from kvstack.jsonvalue import JsonObject
from kvstack.names import ENGINES
from kvstack.rendering.console import err_console, out_console

if TYPE_CHECKING:
    from rich.console import Console

    from kvstack.runtime.status import SupervisorStatus
    from kvstack.serving.lifecycle import ServeEvents
    from kvstack.serving.prepare import Launch
    from kvstack.validation import ValidationReport


def serve_events(json_mode: bool) -> ServeEvents:
    from rich.markup import escape

    from kvstack.runtime.status import format_status
    from kvstack.serving.lifecycle import ServeEvents

    err = err_console()
    last_phase: dict[str, str] = {}  # per process: replicas report side by side
    # On a terminal, one live line (phase, elapsed, last log line) while an engine starts; every
    # phase change is also printed, so logs and pipes get the same story without the spinner.
    live = err.status("") if err.is_terminal else None

    def status(s: SupervisorStatus) -> None:
        if live is not None:
            if s.phase in ("ready", "stopped", "failed"):
                live.stop()
            else:
                live.update(escape(format_status(s, width=max(40, err.width - 4))))
                live.start()
        if s.phase != last_phase.get(s.name):
            last_phase[s.name] = s.phase
            err.print(f"[dim]{s.elapsed_s:6.1f}s[/dim] {escape(s.name)}: {escape(s.phase)}")

    def validation(report: ValidationReport) -> None:
        from kvstack.rendering.validation import render_report

        render_report(report, json_mode)

    return ServeEvents(
        status=status,
        message=lambda m: err.print(escape(m)),
        warning=lambda m: err.print(f"[yellow]warning:[/yellow] {escape(m)}"),
        validation_progress=lambda m: err.print(f"[dim]validate:[/dim] {escape(m)}"),
        validation=validation,
        ready=lambda url: err.print(f"[green]ready[/green] at {escape(url)}"),
    )


def _print_launch(console: Console, doc: JsonObject, title: str = "") -> None:
    """One LaunchSpec's public form: helpers, the server's command line, its files."""
    from rich.markup import escape

    for helper in doc["helpers"]:
        console.print(f"\n[bold]{title}helper {escape(helper['name'])}[/bold]")
        console.print(" ".join(helper["argv"]), markup=False)
    console.print(f"\n[bold]{title}{'engine ' if doc['engine'] in ENGINES else ''}command[/bold]")
    env = " ".join(f"{k}={v}" for k, v in doc["env"].items())
    console.print((env + " " if env else "") + " ".join(doc["argv"]), markup=False)
    for f in doc["files"]:
        console.print(f"\n[bold]{title}file {escape(f['path'])}[/bold] ({f['mode']})")
        console.print(f["content"], markup=False)


def print_dry_run(launch: Launch, json_mode: bool, events: ServeEvents) -> None:
    from kvstack.serving.launch_checks import launch_warnings

    for warning in launch_warnings(launch):
        events.warning(warning)
    doc = launch.dry_run_document()
    if json_mode:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    from rich.markup import escape

    from kvstack.rendering.plan import render as render_plan

    render_plan(launch.plan)
    console = out_console(None)
    if not launch.multi:
        _print_launch(console, doc)
    else:
        layout = doc["port_layout"]
        ports = f"clients use {doc['front_url']}; engines on ports {layout['engines']}"
        console.print(f"\n[bold]ports[/bold]: {escape(ports)}")
        for replica in doc["replicas"]:
            _print_launch(console, replica, f"replica {replica['index']} ")
        if doc["router"] is not None:
            _print_launch(console, doc["router"], "router ")
    console.print("\n(dry run: nothing was started or written)")
