"""``--sweep KIND:L1,L2,...``: the loads a sweep steps through, parsed and checked once."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from kvstack.errors import InputError

# trace_rate: multiples of a trace's own arrival rate (bench --trace --sweep rate:...): a step at 2
# replays the trace's arrival times divided by 2.
LoadKind = Literal["concurrency", "rate", "trace_rate"]
LOAD_KINDS: tuple[str, ...] = ("concurrency", "rate")  # what --sweep KIND names
TRACE_RATE_UNIT = "x trace rate"
MAX_STEPS = 32  # a ladder longer than this is a typo, not a sweep anyone waits for
_HINT = "e.g. --sweep concurrency:1,2,4,8 or --sweep rate:0.5,1,2,4"


@dataclass(frozen=True)
class LoadLadder:
    """The loads of a sweep, ascending and distinct: requests in flight, Poisson requests/s, or
    multiples of a trace's rate."""

    kind: LoadKind
    loads: tuple[float, ...]

    def label(self, load: float) -> str:
        """A load as the tables and plots name it: ``c=4``, ``2.5/s``, ``2x`` (the trace's rate)."""
        if self.kind == "concurrency":
            return f"c={load:g}"
        return f"{load:g}x" if self.kind == "trace_rate" else f"{load:g}/s"

    def of_trace(self) -> LoadLadder:
        """A rate ladder read as multiples of a trace's own rate (``bench --trace --sweep rate:...``)."""
        return replace(self, kind="trace_rate")


def _kind(text: str) -> LoadKind:
    kind = text.strip().lower()
    if kind == "concurrency":
        return "concurrency"
    if kind == "rate":
        return "rate"
    raise InputError(f"--sweep load must be one of {', '.join(LOAD_KINDS)}, not {text.strip()!r}", hint=_HINT)


def _load(kind: LoadKind, text: str, flag: str, hint: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{flag} step {text.strip()!r} is not a number", hint=hint) from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{flag} steps must be positive, not {text.strip()}", hint=hint)
    if kind == "concurrency" and value != int(value):
        raise InputError(f"{flag} concurrency steps are whole requests, not {text.strip()}", hint=hint)
    return value


def parse_ladder(text: str, flag: str = "--sweep") -> LoadLadder:
    """``concurrency:1,2,4,8`` -> LoadLadder("concurrency", (1, 2, 4, 8)); the steps sorted, each once.
    ``flag``: the flag the steps came from, as the errors name it (tune's --sweep-multiples gives
    its steps after a ``rate:`` of its own)."""
    hint = _HINT if flag == "--sweep" else f"e.g. {flag} 0.5,1,2,4"
    kind_text, sep, steps = text.partition(":")
    if not sep:
        raise InputError(f"{flag} needs KIND:STEPS, not {text!r}", hint=hint)
    kind = _kind(kind_text)
    parts = [p for p in steps.split(",") if p.strip()]
    if not parts:
        raise InputError(f"{flag} {kind} names no step", hint=hint)
    loads = tuple(sorted({_load(kind, p, flag, hint) for p in parts}))
    if len(loads) > MAX_STEPS:
        raise InputError(f"{flag} takes at most {MAX_STEPS} steps, not {len(loads)}", hint=hint)
    return LoadLadder(kind, loads)
