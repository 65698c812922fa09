"""The names of the engines, offload layouts and tiers kvstack knows: one list, imported by the
CLI (which must stay light: no pydantic here) and by the plan's schema."""

from __future__ import annotations

from typing import Literal, get_args

from kvstack.errors import InputError

Engine = Literal["vllm", "sglang"]
Connector = Literal["none", "lmcache", "lmcache-mp", "native", "hicache"]
OffloadChoice = Literal["auto", "lmcache", "lmcache-mp", "native", "hicache", "none"]
TierKind = Literal["gpu", "cpu", "disk", "remote"]
Platform = Literal["cuda", "cpu"]

ENGINES: tuple[str, ...] = get_args(Engine)
CONNECTORS: tuple[str, ...] = get_args(Connector)
OFFLOAD_CHOICES: tuple[str, ...] = get_args(OffloadChoice)
Launched = Literal["vllm", "sglang", "vllm-router"]  # what a LaunchSpec starts: an engine or the router

# The per-run control token kvstack hands the engine's guard (kvstack/clients/control.py) in this
# variable, and the header its clients send it in. Here, not in the guard, because the guard runs
# inside vLLM and imports the standard library only (it repeats them), and runtime must not import engines.
CONTROL_ENV = "KVSTACK_CONTROL_TOKEN"
CONTROL_HEADER = "X-Kvstack-Control"


def choice(value: str, choices: tuple[str, ...], flag: str) -> str:
    """The one check of a flag's allowed values: a one-line error naming them (exit 2)."""
    if value not in choices:
        raise InputError(
            f"{flag} must be one of {', '.join(choices)}, not {value!r}", hint=f"e.g. {flag} {choices[0]}"
        )
    return value
