"""``--sweep KIND:L1,L2,...``: the loads a sweep steps through, parsed and checked once."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from kvstack.errors import InputError

LoadKind = Literal["concurrency", "rate"]
LOAD_KINDS: tuple[str, ...] = get_args(LoadKind)
MAX_STEPS = 32  # a ladder longer than this is a typo, not a sweep anyone waits for
_HINT = "e.g. --sweep concurrency:1,2,4,8 or --sweep rate:0.5,1,2,4"


@dataclass(frozen=True)
class LoadLadder:
    """The loads of a sweep, ascending and distinct: requests in flight, or Poisson requests/s."""

    kind: LoadKind
    loads: tuple[float, ...]

    def label(self, load: float) -> str:
        """A load as the tables and plots name it: ``c=4``, ``2.5/s``."""
        return f"c={load:g}" if self.kind == "concurrency" else f"{load:g}/s"


def _kind(text: str) -> LoadKind:
    kind = text.strip().lower()
    if kind == "concurrency":
        return "concurrency"
    if kind == "rate":
        return "rate"
    raise InputError(f"--sweep load must be one of {', '.join(LOAD_KINDS)}, not {text.strip()!r}", hint=_HINT)


def _load(kind: LoadKind, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"--sweep step {text.strip()!r} is not a number", hint=_HINT) from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"--sweep steps must be positive, not {text.strip()}", hint=_HINT)
    if kind == "concurrency" and value != int(value):
        raise InputError(f"--sweep concurrency steps are whole requests, not {text.strip()}", hint=_HINT)
    return value


def parse_ladder(text: str) -> LoadLadder:
    """``concurrency:1,2,4,8`` -> LoadLadder("concurrency", (1, 2, 4, 8)); the steps sorted, each once."""
    kind_text, sep, steps = text.partition(":")
    if not sep:
        raise InputError(f"--sweep needs KIND:STEPS, not {text!r}", hint=_HINT)
    kind = _kind(kind_text)
    parts = [p for p in steps.split(",") if p.strip()]
    if not parts:
        raise InputError(f"--sweep {kind} names no step", hint=_HINT)
    loads = tuple(sorted({_load(kind, p) for p in parts}))
    if len(loads) > MAX_STEPS:
        raise InputError(f"--sweep takes at most {MAX_STEPS} steps, not {len(loads)}", hint=_HINT)
    return LoadLadder(kind, loads)
