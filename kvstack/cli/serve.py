"""`kvstack serve`: plan, write the connector config, launch the engine, validate, keep serving."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kvstack.canary.defaults import DEFAULT_INTERVAL_S
from kvstack.cli import canary_options as copt
from kvstack.cli import options as opt
from kvstack.cli import remote_options as ropt
from kvstack.errors import InputError

if TYPE_CHECKING:
    from kvstack.planning.trace_sizing import TraceInput
    from kvstack.serving.request import ServeRequest

from kvstack.names import ENGINES, choice
from kvstack.names import OFFLOAD_CHOICES as OFFLOADS
from kvstack.validation.thresholds import DEFAULT_MIN_SPEEDUP, DEFAULT_MIN_TIER_SPEEDUP

DEFAULT_BUDGET_TEXT = copt.DEFAULTS["budget"]


def run_serve(request: ServeRequest, dry_run: bool, json_mode: bool, trace: TraceInput | None = None) -> int:
    from kvstack.rendering.serve import print_dry_run, serve_events
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
        print_dry_run(launch, json_mode, events)
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
        from kvstack.replay.inputs import read_trace_input

        traced = read_trace_input(
            trace, trace_sample, 0, None, (offload_cost, offload_cost_from), None, calibration
        )
        code = run_serve(request, dry_run, json_mode, traced)
        if code:
            raise typer.Exit(code)
