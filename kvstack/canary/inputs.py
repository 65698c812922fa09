"""The canary's flags (`serve` takes them; `kvstack canary` under shorter names), declared once, and
the ServeRequest fields they set."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Self, TypedDict, cast

from pydantic import model_validator

from kvstack.canary.defaults import DEFAULT_BUDGET, DEFAULT_INTERVAL_S, ON_WRONG_KV, OnWrongKv
from kvstack.errors import InputError
from kvstack.flags import Inputs, flag

DEFAULT_BUDGET_TEXT = f"{DEFAULT_BUDGET:.0%}"


def parse_budget(text: str) -> float:
    """``1%`` or ``0.01`` -> 0.01; refused outside (0, 1]."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise InputError(
            f"--canary-budget {text!r} is not a share of prefill between 0 and 100%",
            hint="e.g. --canary-budget 1%",
        )
    return value


def read_token(path: Path | None) -> str | None:
    """The bearer token /metrics wants: the file's first line (None: no file given)."""
    if path is None:
        return None
    from kvstack.userfile import read_text

    text = read_text(
        path, InputError, "write the bearer token Prometheus sends in it", what="--metrics-token-file"
    )
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise InputError(f"--metrics-token-file {path} is empty", hint="write the bearer token in it")
    return token


class CanaryInputs(Inputs):
    no_canary: Annotated[
        bool,
        flag(
            "--no-canary", help="Do not re-check the offload tiers' answers against recompute while serving."
        ),
    ] = False
    canary_interval: Annotated[
        float,
        flag(
            "--canary-interval",
            help="Seconds between canary checks, at least (the prefill budget may space them further).",
            gt=0,
            example="60",
        ),
    ] = DEFAULT_INTERVAL_S
    canary_budget: Annotated[
        str,
        flag(
            "--canary-budget",
            help="The largest share of the engine's prefill the canary may take: 1%, 0.5%, 0.01.",
        ),
    ] = DEFAULT_BUDGET_TEXT
    on_wrong_kv: Annotated[
        str,
        flag(
            "--on-wrong-kv",
            help="When the canary finds wrong KV: fallback (restart without the offload tiers), stop, warn.",
            choices=ON_WRONG_KV,
        ),
    ] = "fallback"
    metrics_port: Annotated[
        int,
        flag(
            "--metrics-port",
            help="Port of kvstack's own /metrics (the canary's), on 127.0.0.1; 0 picks a free one.",
        ),
    ] = 0
    metrics_token_file: Annotated[
        Path | None,
        flag(
            "--metrics-token-file",
            help="File holding the bearer token /metrics wants (default: the run's control token).",
        ),
    ] = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        if not math.isfinite(self.canary_interval):
            raise InputError(
                f"--canary-interval must be positive, not {self.canary_interval:g}",
                hint="e.g. --canary-interval 60",
            )
        if not 0 <= self.metrics_port <= 65535:
            raise InputError(
                f"--metrics-port {self.metrics_port} is not a port", hint="e.g. --metrics-port 9400, or 0"
            )
        parse_budget(self.canary_budget)
        return self

    def fields(self) -> CanaryFields:
        """The ServeRequest fields these flags set (the token file read)."""
        return {
            "canary": not self.no_canary,
            "canary_interval_s": self.canary_interval,
            "canary_budget": parse_budget(self.canary_budget),
            "on_wrong_kv": cast(OnWrongKv, self.on_wrong_kv),  # one of ON_WRONG_KV: the flag's choices
            "metrics_port": self.metrics_port,
            "metrics_token": read_token(self.metrics_token_file),
        }


class CanaryFields(TypedDict):
    """The ServeRequest fields the canary's flags set (``CanaryInputs.fields``)."""

    canary: bool
    canary_interval_s: float
    canary_budget: float
    on_wrong_kv: OnWrongKv
    metrics_port: int
    metrics_token: str | None


class WatchInputs(Inputs):
    """``kvstack canary``'s own flags (its interval, budget and action are CanaryInputs', renamed):
    the probe, its /metrics, where it writes, when it stops."""

    probe_tokens: Annotated[
        int | None,
        flag("--probe-tokens", help="Probe prompt length (default 1024, within the model's context)"),
    ] = None
    metrics_host: Annotated[
        str, flag("--metrics-host", help="Bind address of /metrics (loopback by default)")
    ] = "127.0.0.1"
    no_metrics: Annotated[bool, flag("--no-metrics", help="Serve no /metrics")] = False
    run_dir: Annotated[
        Path | None,
        flag("--run-dir", help="Where canary.json and events.jsonl go (default: a new state dir)"),
    ] = None
    checks: Annotated[
        int, flag("--checks", help="Stop after this many checks (0: until stopped)", ge=0, example="10")
    ] = 0
