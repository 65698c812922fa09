"""What a user asks ``kvstack serve`` for, with the defaults resolved in one place."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from kvstack.canary.defaults import DEFAULT_BUDGET, DEFAULT_INTERVAL_S, OnWrongKv
from kvstack.planning.schema import Engine, OffloadChoice
from kvstack.profiles import profiles_dir
from kvstack.rundir import default_cache_root, new_run_dir
from kvstack.serving.plan_inputs import resolve_dir
from kvstack.validation.thresholds import DEFAULT_MIN_SPEEDUP, DEFAULT_MIN_TIER_SPEEDUP

ENGINE_PYTHON_ENV = "KVSTACK_ENGINE_PYTHON"


def demo_model_dir() -> Path:
    return profiles_dir() / "demo"


def engine_python() -> str:
    """The interpreter that has the engine installed: the one running kvstack, unless overridden."""
    return os.environ.get(ENGINE_PYTHON_ENV) or sys.executable


class ServeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = None  # None: the bundled demo model
    revision: str | None = None  # a Hugging Face id's branch, tag or commit
    engine: Engine = "vllm"
    offload: OffloadChoice = "auto"
    hardware: Path | None = None
    context: str | None = None
    users: int | None = None  # None: the workload's, else 1
    tp: int | None = None
    kv_dtype: str | None = None
    remote: str | None = Field(default=None, repr=False)
    # A shared tier whose live writers store other KV: refused (False) or served with keys of its own.
    allow_mixed_tier: bool = False
    workload: str | None = None
    retain: str | None = None  # --retain: a multiple of the working set or a size
    no_disk: bool = False
    min_disk_bw: str | None = None  # --min-disk-bw: the slowest disk worth a tier (default 1GB/s)
    tuned: Path | None = None  # --tuned: a kvstack tune --out DIR whose layout the plan takes
    host: str = "127.0.0.1"
    port: int = 8000
    cache_dir: Path | None = None
    run_dir: Path | None = None
    api_key: str | None = Field(default=None, repr=False)
    ready_timeout_s: float = 900.0
    validate_after_start: bool = True
    exit_after_validate: bool = False
    prompt_tokens: int | None = None
    min_speedup: float = DEFAULT_MIN_SPEEDUP
    min_tier_speedup: float = DEFAULT_MIN_TIER_SPEEDUP
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
    replicas: int = 1  # engines on consecutive ports, supervised as one unit (serving.replicas)
    router: bool = False  # vllm-router in front of them, on --port

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
