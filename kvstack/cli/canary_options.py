"""The canary's options (`serve`), declared once, and their checks."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from kvstack.canary.defaults import DEFAULT_BUDGET, ON_WRONG_KV
from kvstack.errors import InputError
from kvstack.names import choice

NoCanary = Annotated[
    bool,
    typer.Option(
        "--no-canary", help="Do not re-check the offload tiers' answers against recompute while serving."
    ),
]
CanaryInterval = Annotated[
    float,
    typer.Option(
        "--canary-interval",
        help="Seconds between canary checks, at least (the prefill budget may space them further).",
    ),
]
CanaryBudget = Annotated[
    str,
    typer.Option(
        "--canary-budget",
        help="The largest share of the engine's prefill the canary may take: 1%, 0.5%, 0.01.",
    ),
]
# `kvstack canary`'s own names for the same two (the command is the canary: no prefix).
Interval = Annotated[
    float,
    typer.Option("--interval", help="Seconds between checks, at least (the budget may space them further)."),
]
Budget = Annotated[
    str,
    typer.Option("--budget", help="The largest share of the engine's prefill the canary may take: 1%, 0.01."),
]
OnWrongKvOption = Annotated[
    str,
    typer.Option(
        "--on-wrong-kv",
        help="When the canary finds wrong KV: fallback (restart without the offload tiers), stop, warn.",
    ),
]
MetricsPort = Annotated[
    int,
    typer.Option(
        "--metrics-port",
        help="Port of kvstack's own /metrics (the canary's), on 127.0.0.1; 0 picks a free one.",
    ),
]
MetricsTokenFile = Annotated[
    Path | None,
    typer.Option(
        "--metrics-token-file",
        help="File holding the bearer token /metrics wants (default: the run's control token).",
    ),
]


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


def canary_fields(
    no_canary: bool,
    interval: float,
    budget: str,
    on_wrong_kv: str,
    metrics_port: int,
    token_file: Path | None,
) -> dict[str, Any]:
    """The ServeRequest fields the canary's options set, checked."""
    if not math.isfinite(interval) or interval <= 0:
        raise InputError(
            f"--canary-interval must be positive, not {interval:g}", hint="e.g. --canary-interval 60"
        )
    if not 0 <= metrics_port <= 65535:
        raise InputError(
            f"--metrics-port {metrics_port} is not a port", hint="e.g. --metrics-port 9400, or 0"
        )
    return {
        "canary": not no_canary,
        "canary_interval_s": interval,
        "canary_budget": parse_budget(budget),
        "on_wrong_kv": choice(on_wrong_kv, ON_WRONG_KV, "--on-wrong-kv"),
        "metrics_port": metrics_port,
        "metrics_token": read_token(token_file),
    }


DEFAULTS = {"budget": f"{DEFAULT_BUDGET:.0%}"}
