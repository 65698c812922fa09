"""What a user asks ``kvstack serve`` for, with the defaults resolved in one place."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

from pydantic import Field

from kvstack.canary.defaults import DEFAULT_BUDGET, DEFAULT_INTERVAL_S, OnWrongKv
from kvstack.canary.inputs import CanaryFields
from kvstack.flags import Inputs, Json, flag
from kvstack.profiles import profiles_dir
from kvstack.remoteurl import ParsedRemote, RemoteURL
from kvstack.rundir import default_cache_root, new_run_dir
from kvstack.serving.plan_inputs import PlanInputs, resolve_dir
from kvstack.validation.inputs import ValidationInputs

ENGINE_PYTHON_ENV = "KVSTACK_ENGINE_PYTHON"


def demo_model_dir() -> Path:
    return profiles_dir() / "demo"


def engine_python() -> str:
    """The interpreter that has the engine installed: the one running kvstack, unless overridden."""
    return os.environ.get(ENGINE_PYTHON_ENV) or sys.executable


class ServeRequest(ValidationInputs, PlanInputs):
    """What a user asks ``kvstack serve`` for: the plan's inputs, then how to serve, validate and
    watch it. Fields with a flag are serve's options; the rest are set from other inputs (the remote
    store's URL, the API key, the canary's flags) or by bench and tune."""

    # serve's model is optional (None: the bundled demo model), the plan's required
    model: Annotated[
        str | None,
        flag("--model", help="Local model dir, Hugging Face id (org/name) or catalog name (default: demo)"),
    ] = None  # type: ignore[assignment]
    # The remote store's URL, parsed where it entered (RemoteInputs.parsed), credentials included.
    remote: ParsedRemote = Field(default=None, repr=False, exclude=True)
    # A shared tier whose live writers store other KV: refused (False) or served with keys of its own.
    allow_mixed_tier: Annotated[
        bool,
        flag(
            "--allow-mixed-tier",
            help="Serve even when the shared tier's other writers store their KV otherwise (another chunk "
            "size, hash seed, KV dtype, ...): this engine's hits there are then its own. Refused by default.",
        ),
    ] = False
    host: Annotated[str, flag("--host", help="Bind address (loopback by default)")] = "127.0.0.1"
    port: Annotated[
        int, flag("--port", help="Server port (with --router the router's; engines from port+1)")
    ] = 8000
    replicas: Annotated[
        int,
        flag(
            "--replicas",
            help="Engines on consecutive ports, sharing the remote tier, run as one",
            ge=1,
            example="2",
        ),
    ] = 1  # engines on consecutive ports, supervised as one unit (serving.replicas)
    router: Annotated[
        bool, flag("--router", help="Put vllm-router (cache-aware) in front of the replicas, on --port")
    ] = False  # vllm-router in front of them, on --port
    run_dir: Annotated[Path | None, flag("--run-dir", help="Where configs, logs and reports go")] = None
    api_key: str | None = Field(default=None, repr=False)
    ready_timeout_s: Annotated[
        float, flag("--ready-timeout", help="Seconds to wait for readiness", gt=0, example="600")
    ] = 900.0
    validate_after_start: bool = True
    exit_after_validate: Annotated[bool, flag("--exit-after-validate", help="Stop after validating")] = False
    extra_args: list[str] = Field(default_factory=list)
    fio_seconds: float = 3.0
    # The canary (kvstack/canary): probes asked again while serving, judged against recompute.
    canary: bool = True  # on when an offload tier is served
    canary_interval_s: float = DEFAULT_INTERVAL_S
    canary_budget: float = DEFAULT_BUDGET  # the largest share of the engine's prefill it may take
    on_wrong_kv: OnWrongKv = "fallback"
    metrics_port: int = 0  # kvstack's own /metrics on --host's loopback: 0 picks a free port
    # The bearer /metrics wants (--metrics-token-file's content); None: the run's control token.
    metrics_token: str | None = Field(default=None, repr=False)

    def completed(
        self,
        *,
        remote: RemoteURL | None = None,
        api_key: str | None = None,
        extra_args: list[str] | None = None,
        validate: bool = True,
        canary: CanaryFields | None = None,
        model: str | None = None,
        run_dir: Path | None = None,
    ) -> ServeRequest:
        """This request with what its flags do not hold: the remote store's URL and the API key (as
        resolved from their own inputs), the engine arguments after --, whether to validate after
        start, the canary's fields (``CanaryInputs.fields``), and bench's own --model and --run-dir
        (None keeps this request's)."""
        out = self.model_copy()
        out.remote, out.api_key = remote, api_key
        out.extra_args, out.validate_after_start = list(extra_args or []), validate
        if canary is not None:
            out.canary, out.canary_interval_s = canary["canary"], canary["canary_interval_s"]
            out.canary_budget, out.on_wrong_kv = canary["canary_budget"], canary["on_wrong_kv"]
            out.metrics_port, out.metrics_token = canary["metrics_port"], canary["metrics_token"]
        if model is not None:
            out.model = model
        if run_dir is not None:
            out.run_dir = run_dir
        return out

    @property
    def multi(self) -> bool:
        """More than one engine, or a router: each replica then gets a run dir of its own."""
        return self.replicas > 1 or self.router

    @property
    def uses_demo_model(self) -> bool:
        return self.model is None

    def model_spec(self) -> str:
        return self.model if self.model is not None else str(demo_model_dir())

    def resolved_cache_root(self) -> Path:
        return resolve_dir(self.cache_dir or default_cache_root())

    def resolved_run_dir(self) -> Path:
        return (self.run_dir or new_run_dir(self.port)).expanduser().absolute()

    def secrets(self) -> list[str]:
        return [s for s in (self.api_key,) if s]


class ServeRunInputs(Inputs):
    """How ``kvstack serve`` runs and reports: a dry run, JSON events, the validation pass skipped."""

    dry_run: Annotated[bool, flag("--dry-run", help="Print what would run; start and write nothing")] = False
    as_json: Json
    no_validate: Annotated[bool, flag("--no-validate", help="Skip the TTFT validation pass")] = False
