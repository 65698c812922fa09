"""`kvstack serve`: plan, write the connector config, launch the engine, validate, keep serving."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from kvstack.canary.defaults import DEFAULT_INTERVAL_S
from kvstack.cli import canary_options as copt
from kvstack.cli import options as opt
from kvstack.cli import remote_options as ropt
from kvstack.errors import InputError

if TYPE_CHECKING:
    from rich.console import Console

    from kvstack.planning.trace_sizing import TraceInput
    from kvstack.runtime.status import SupervisorStatus
    from kvstack.serving.lifecycle import ServeEvents
    from kvstack.serving.prepare import Launch
    from kvstack.serving.request import ServeRequest
    from kvstack.validation import ValidationReport

from kvstack.names import ENGINES, choice
from kvstack.names import OFFLOAD_CHOICES as OFFLOADS
from kvstack.validation.thresholds import DEFAULT_MIN_SPEEDUP, DEFAULT_MIN_TIER_SPEEDUP

DEFAULT_BUDGET_TEXT = copt.DEFAULTS["budget"]


def serve_events(json_mode: bool) -> ServeEvents:
    from rich.console import Console
    from rich.markup import escape

    from kvstack.runtime.status import format_status
    from kvstack.serving.lifecycle import ServeEvents

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


def _print_dry_run(launch: Launch, json_mode: bool, events: ServeEvents) -> None:
    from kvstack.serving.launch_checks import launch_warnings

    for warning in launch_warnings(launch):
        events.warning(warning)
    doc = launch.dry_run_document()
    if json_mode:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return
    from rich.console import Console
    from rich.markup import escape

    from kvstack.cli.plan import render as render_plan

    render_plan(launch.plan)
    console = Console(highlight=False, soft_wrap=True)
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


def run_serve(request: ServeRequest, dry_run: bool, json_mode: bool, trace: TraceInput | None = None) -> int:
    from kvstack.serving.lifecycle import run
    from kvstack.serving.prepare import prepare

    events = serve_events(json_mode)
    if request.uses_demo_model:
        weights = (
            "seeded weights from scripts/make-demo-model"
            if (Path(request.model_spec()) / "model.safetensors").is_file()
            else "dummy weights: scripts/make-demo-model --weights generates real ones"
        )
        events.message(
            f"no --model given: serving the bundled demo model ({request.model_spec()}, {weights})"
        )
    from kvstack.serving.request_checks import check_request

    for warning in check_request(request, dry_run=dry_run):
        events.warning(warning)
    launch = prepare(request, trace=trace)
    if dry_run:
        _print_dry_run(launch, json_mode, events)
        return 0
    return run(launch, events)  # the plan's warnings and the launch's notes follow its preflight


def register(app: typer.Typer) -> None:
    @app.command("serve", context_settings={"allow_interspersed_args": False})
    def _cmd(
        extra_args: list[str] = typer.Argument(
            None, help="Extra engine arguments, after --", show_default=False
        ),
        model: str | None = typer.Option(
            None,
            "--model",
            help="Local model dir, Hugging Face id (org/name) or catalog name (default: demo)",
        ),
        revision: opt.Revision = None,
        engine: opt.Engine = "vllm",
        offload: opt.Offload = "auto",
        hardware: opt.Hardware = None,
        context: opt.Context = None,
        users: opt.Users = None,
        tp: opt.TensorParallel = None,
        kv_dtype: opt.KvDtype = None,
        remote: ropt.Remote = None,
        remote_file: ropt.RemoteFile = None,
        allow_mixed_tier: ropt.AllowMixedTier = False,
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
        retain: opt.Retain = None,
        no_disk: opt.NoDisk = False,
        min_disk_bw: opt.MinDiskBw = None,
        trace: opt.Trace = None,
        trace_sample: opt.TraceSample = None,
        offload_cost: opt.OffloadCost = None,
        offload_cost_from: opt.OffloadCostFrom = None,
        calibration: opt.Calibration = None,
        tuned: opt.Tuned = None,
        run_dir: Path | None = typer.Option(None, "--run-dir", help="Where configs, logs and reports go"),
        api_key: opt.ApiKey = None,
        api_key_file: opt.ApiKeyFile = None,
        ready_timeout: float = typer.Option(900.0, "--ready-timeout", help="Seconds to wait for readiness"),
        prompt_tokens: int | None = typer.Option(None, "--prompt-tokens", help="Validation prompt length"),
        min_speedup: opt.MinSpeedup = DEFAULT_MIN_SPEEDUP,
        min_tier_speedup: opt.MinTierSpeedup = DEFAULT_MIN_TIER_SPEEDUP,
        dry_run: bool = typer.Option(
            False, "--dry-run", help="Print what would run; start and write nothing"
        ),
        json_mode: bool = typer.Option(False, "--json", help="Machine-readable output"),
        no_validate: bool = typer.Option(False, "--no-validate", help="Skip the TTFT validation pass"),
        exit_after_validate: bool = typer.Option(
            False, "--exit-after-validate", help="Stop after validating"
        ),
        no_canary: copt.NoCanary = False,
        canary_interval: copt.CanaryInterval = DEFAULT_INTERVAL_S,
        canary_budget: copt.CanaryBudget = DEFAULT_BUDGET_TEXT,
        on_wrong_kv: copt.OnWrongKvOption = "fallback",
        metrics_port: copt.MetricsPort = 0,
        metrics_token_file: copt.MetricsTokenFile = None,
    ) -> None:
        """Plan the KV tiers, write the connector config, launch the engine, validate it, keep serving."""
        from kvstack.apikey import resolve_api_key
        from kvstack.remote.source import resolve_remote
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
            revision=revision,
            engine=choice(engine, ENGINES, "--engine"),  # type: ignore[arg-type]
            offload=choice(offload, OFFLOADS, "--offload"),  # type: ignore[arg-type]
            hardware=hardware,
            context=context,
            users=users,
            tp=tp,
            kv_dtype=kv_dtype,
            remote=resolve_remote(remote, remote_file),
            allow_mixed_tier=allow_mixed_tier,
            workload=workload,
            retain=retain,
            no_disk=no_disk,
            min_disk_bw=min_disk_bw,
            tuned=tuned,
            host=host,
            port=port,
            cache_dir=cache_dir,
            run_dir=run_dir,
            api_key=resolve_api_key(api_key, api_key_file).value,
            ready_timeout_s=ready_timeout,
            validate_after_start=not no_validate,
            exit_after_validate=exit_after_validate,
            prompt_tokens=prompt_tokens,
            min_speedup=min_speedup,
            min_tier_speedup=min_tier_speedup,
            extra_args=list(extra_args or []),
            replicas=replicas,
            router=router,
            **copt.canary_fields(
                no_canary, canary_interval, canary_budget, on_wrong_kv, metrics_port, metrics_token_file
            ),
        )
        from kvstack.cli.plan_trace import read_trace_input

        traced = read_trace_input(
            trace, trace_sample, 0, None, (offload_cost, offload_cost_from), None, calibration
        )
        code = run_serve(request, dry_run, json_mode, traced)
        if code:
            raise typer.Exit(code)
