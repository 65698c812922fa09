"""The canary's defaults, in one light module (the CLI imports it for --help)."""

from typing import Literal

DEFAULT_INTERVAL_S = 60.0  # seconds between checks, at most (the budget may stretch it)
DEFAULT_BUDGET = 0.01  # the largest share of the engine's computed prefill tokens it may take
OnWrongKv = Literal["fallback", "stop", "warn"]
ON_WRONG_KV: tuple[str, ...] = ("fallback", "stop", "warn")
