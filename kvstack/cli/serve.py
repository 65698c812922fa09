"""`kvstack serve`: plan, write the connector config, launch the engine, validate, keep serving."""

from __future__ import annotations

import ipaddress
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from kvstack.cli import options as opt
from kvstack.errors import InputError

if TYPE_CHECKING:
    from rich.console import Console

    from kvstack.runtime.supervisor import SupervisorStatus
    from kvstack.serving.prepare import Prepared
    from kvstack.serving.replicas import ReplicaSet
    from kvstack.serving.request import ServeRequest
    from kvstack.serving.session import ServeEvents
    from kvstack.validate import ValidationReport

ENGINES = ("vllm", "sglang")
OFFLOADS = ("auto", "lmcache", "lmcache-mp", "native", "hicache", "none")


def choice(value: str, choices: tuple[str, ...], flag: str) -> str:
    if value not in choices:
        raise InputError(
            f"{flag} must be one of {', '.join(choices)}, not {value!r}", hint=f"e.g. {flag} {choices[0]}"
        )
    return value


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve_events(json_mode: bool) -> ServeEvents:
    from rich.console import Console
    from rich.markup import escape

    from kvstack.runtime.supervisor import format_status
    from kvstack.serving.session import ServeEvents

    err = Console(stderr=True, highlight=False, soft_wrap=True)
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
        from kvstack.cli.validate import render

        if json_mode:
            sys.stdout.write(report.to_json() + "\n")
        else:
            render(report)

    return ServeEvents(
        status=status,
        message=lambda m: err.print(escape(m)),
        warning=lambda m: err.print(f"[yellow]warning:[/yellow] {escape(m)}"),
        validation_progress=lambda m: err.print(f"[dim]validate:[/dim] {escape(m)}"),
        validation=validation,
        ready=lambda url: err.print(f"[green]ready[/green] at {escape(url)}"),
    )


def _print_launch(console: Console, doc: dict[str, Any], title: str = "") -> None:
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


def _print_dry_run(prepared: Prepared | ReplicaSet, json_mode: bool) -> None:
    doc = prepared.dry_run_document()
    if json_mode:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    from rich.console import Console
    from rich.markup import escape

    from kvstack.cli.plan import render as render_plan

    render_plan(prepared.plan)
    console = Console(highlight=False, soft_wrap=True)
    if "replicas" not in doc:
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


def run_serve(request: ServeRequest, dry_run: bool, json_mode: bool) -> int:
    from kvstack.serving.prepare import prepare
    from kvstack.serving.session import run

    events = serve_events(json_mode)
    if request.uses_demo_model:
        events.message(
            f"no --model given: serving the bundled demo model ({request.model_spec()}, dummy weights)"
        )
    if not is_loopback(request.host) and not request.api_key:
        events.warning(
            f"binding {request.host} without --api-key: anyone who can reach it can use the server"
        )
    if request.multi:
        from kvstack.serving.replica_session import run_replicas
        from kvstack.serving.replicas import prepare_replicas

        replicas = prepare_replicas(request)
        for warning in replicas.plan.warnings:
            events.warning(warning)
        if dry_run:
            _print_dry_run(replicas, json_mode)
            return 0
        return run_replicas(replicas, events)
    prepared = prepare(request)
    for warning in prepared.plan.warnings:
        events.warning(warning)
    if dry_run:
        _print_dry_run(prepared, json_mode)
        return 0
    return run(prepared, events)


def register(app: typer.Typer) -> None:
    @app.command("serve", context_settings={"allow_interspersed_args": False})
    def _cmd(
        extra_args: list[str] = typer.Argument(
            None, help="Extra engine arguments, after --", show_default=False
        ),
        model: str | None = typer.Option(
            None, "--model", help="Local model dir or catalog name (default: demo)"
        ),
        engine: opt.Engine = "vllm",
        offload: opt.Offload = "auto",
        hardware: opt.Hardware = None,
        context: opt.Context = None,
        users: opt.Users = None,
        tp: opt.TensorParallel = None,
        kv_dtype: opt.KvDtype = None,
        remote: opt.Remote = None,
        workload: opt.Workload = None,
        host: str = typer.Option("127.0.0.1", "--host", help="Bind address (loopback by default)"),
        port: int = typer.Option(
            8000, "--port", help="Server port (with --router the router's; engines from port+1)"
        ),
        replicas: int = typer.Option(
            1, "--replicas", help="Engines on consecutive ports, sharing the remote tier, run as one"
        ),
        router: bool = typer.Option(
            False, "--router", help="Put vllm-router (cache-aware) in front of the replicas, on --port"
        ),
        cache_dir: opt.CacheDir = None,
        run_dir: Path | None = typer.Option(None, "--run-dir", help="Where configs, logs and reports go"),
        api_key: str | None = typer.Option(
            None,
            "--api-key",
            envvar="KVSTACK_API_KEY",
            help="Require this key (env KVSTACK_API_KEY)",
            show_default=False,
        ),
        ready_timeout: float = typer.Option(900.0, "--ready-timeout", help="Seconds to wait for readiness"),
        prompt_tokens: int | None = typer.Option(None, "--prompt-tokens", help="Validation prompt length"),
        min_speedup: float = typer.Option(1.5, "--min-speedup", help="Warm/cold TTFT ratio to pass"),
        dry_run: bool = typer.Option(
            False, "--dry-run", help="Print what would run; start and write nothing"
        ),
        json_mode: bool = typer.Option(False, "--json", help="Machine-readable output"),
        no_validate: bool = typer.Option(False, "--no-validate", help="Skip the TTFT validation pass"),
        exit_after_validate: bool = typer.Option(
            False, "--exit-after-validate", help="Stop after validating"
        ),
    ) -> None:
        """Plan the KV tiers, write the connector config, launch the engine, validate it, keep serving."""
        from kvstack.serving.request import ServeRequest

        if users is not None and users < 1:
            raise InputError(f"--users must be at least 1, not {users}", hint="e.g. --users 4")
        if replicas < 1:
            raise InputError(f"--replicas must be at least 1, not {replicas}", hint="e.g. --replicas 2")
        if ready_timeout <= 0:
            raise InputError(
                f"--ready-timeout must be positive, not {ready_timeout:g}", hint="e.g. --ready-timeout 600"
            )
        if no_validate and exit_after_validate:
            raise InputError("--no-validate and --exit-after-validate contradict each other", hint="drop one")
        request = ServeRequest(
            model=model,
            engine=choice(engine, ENGINES, "--engine"),  # type: ignore[arg-type]
            offload=choice(offload, OFFLOADS, "--offload"),  # type: ignore[arg-type]
            hardware=hardware,
            context=context,
            users=users,
            tp=tp,
            kv_dtype=kv_dtype,
            remote=remote,
            workload=workload,
            host=host,
            port=port,
            cache_dir=cache_dir,
            run_dir=run_dir,
            api_key=api_key,
            ready_timeout_s=ready_timeout,
            validate_after_start=not no_validate,
            exit_after_validate=exit_after_validate,
            prompt_tokens=prompt_tokens,
            min_speedup=min_speedup,
            extra_args=list(extra_args or []),
            replicas=replicas,
            router=router,
        )
        code = run_serve(request, dry_run, json_mode)
        if code:
            raise typer.Exit(code)
