"""What the canary has seen, in the form the run dir, `kvstack top`, the metrics and the exports read.

``canary.json`` in the run dir is the whole state, rewritten after every check (atomic, 0600);
``events.jsonl`` gets one line per check and one per action taken on wrong KV (appended, 0600).
Nothing here holds a secret: probes are kvstack's own prompts, named by their nonce.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from kvstack.canary.defaults import OnWrongKv
from kvstack.fsutil import atomic_write
from kvstack.rundir import CANARY_JSON, EVENTS_JSONL

CheckVerdict = Literal["pass", "fail", "unknown"]
# Where a re-asked probe was served from (canary/attribution.py): the engine's own cache, one offload
# tier, several at once (requests in flight moved the same counters), an offload tier the counters
# do not name, or nothing (recomputed).
SERVED_FROM: tuple[str, ...] = ("gpu", "cpu", "disk", "remote", "offload", "mixed", "recompute")
Status = Literal["starting", "waiting", "watching", "fallback", "stopped"]


class CheckRecord(BaseModel):
    """One probe asked again and judged against a recompute."""

    at: float  # unix time the answer was judged
    asked_at: float | None = None  # unix time the probe was asked again
    probe: str  # the probe's nonce
    age_s: float  # seconds since it was planted
    served_from: str  # one of SERVED_FROM
    hit_tokens: dict[str, float] = Field(default_factory=dict)  # counter deltas around the request
    prompt_tokens: int = 0
    verdict: CheckVerdict
    typical: float | None = None  # the answer's typical disagreement with recompute, nats
    worst: float | None = None
    gate: float | None = None
    in_flight: float | None = None  # requests the engine was running when the probe was asked
    detail: str = ""
    replica: str | None = None  # the engine asked (host:port), when the canary watches several


class FallbackRecord(BaseModel):
    """What was done about wrong KV, and since when."""

    at: float
    action: OnWrongKv
    served_from: str  # the tier whose answer failed
    detail: str
    tiers_off: list[str] = Field(default_factory=list)  # offload tiers serving no longer reads
    restarted: int = 0  # engines restarted without them
    replica: str | None = None  # the engine whose answer failed, when the canary watches several


class ReplicaState(BaseModel):
    """What the canary has seen on one engine of several (``kvstack serve --replicas N``)."""

    status: Status = "starting"
    waiting_for: str = ""
    gate: float | None = None
    checks: dict[str, dict[str, int]] = Field(default_factory=dict)
    last: CheckRecord | None = None
    last_pass_at: float | None = None
    last_fail: CheckRecord | None = None
    canary_tokens: int = 0
    engine_tokens: float = 0.0

    @property
    def share(self) -> float | None:
        return None if self.engine_tokens <= 0 else min(1.0, self.canary_tokens / self.engine_tokens)

    def count(self, verdict: str) -> int:
        return sum(v.get(verdict, 0) for v in self.checks.values())


class CanaryState(BaseModel):
    started_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)
    status: Status = "starting"
    waiting_for: str = ""  # why no check is due (status waiting)
    interval_s: float
    budget: float  # the largest share of the engine's computed prefill the canary may take
    on_wrong_kv: OnWrongKv
    probe_tokens: int = 0
    gate: float | None = None
    noise: str = ""  # where the gate came from, in words
    checks: dict[str, dict[str, int]] = Field(default_factory=dict)  # served_from -> verdict -> count
    largest_typical: float | None = None  # over passing checks: the closest a correct answer came
    last: CheckRecord | None = None
    last_pass_at: float | None = None
    last_fail: CheckRecord | None = None
    canary_tokens: int = 0  # prompt tokens the canary had the engine compute
    engine_tokens: float = 0.0  # prompt tokens the engine computed since the canary started
    engine_prefill_s: float | None = None  # the engine's own prefill time since then
    fallback: FallbackRecord | None = None
    metrics_url: str | None = None
    # Each engine's own, by host:port, when the canary watches several (the fields above sum them).
    replicas: dict[str, ReplicaState] = Field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(sum(v.values()) for v in self.checks.values())

    def count(self, verdict: str) -> int:
        return sum(v.get(verdict, 0) for v in self.checks.values())

    @property
    def share(self) -> float | None:
        """The canary's share of the prompt tokens the engine computed since it started."""
        if self.engine_tokens <= 0:
            return None
        return min(1.0, self.canary_tokens / self.engine_tokens)

    def record(self, check: CheckRecord) -> None:
        by = self.checks.setdefault(check.served_from, {})
        by[check.verdict] = by.get(check.verdict, 0) + 1
        self.last = check
        if check.verdict == "pass":
            self.last_pass_at = check.at
            if check.typical is not None:
                self.largest_typical = max(self.largest_typical or 0.0, check.typical)
        elif check.verdict == "fail":
            self.last_fail = check

    def share_line(self) -> str:
        """The measured cost, in words."""
        share = self.share
        if share is None:
            return "prefill share: not measured yet (the engine has computed no prompt tokens)"
        text = (
            f"prefill share {share:.2%} (the canary's {self.canary_tokens:,} computed prompt tokens of "
            f"the engine's {self.engine_tokens:,.0f} since it started"
        )
        if self.engine_prefill_s is not None:
            text += (
                f"; of {self.engine_prefill_s:.1f} s engine prefill, ~{share * self.engine_prefill_s:.2f} s"
            )
        return text + f"; budget {self.budget:.2%})"

    def summary(self) -> str:
        """One line: checks by where they were served and their verdicts, the closest call, the cost."""
        parts = []
        for where in SERVED_FROM:
            by = self.checks.get(where)
            if by:
                parts.append(
                    f"{where} " + "/".join(f"{by[v]} {v}" for v in ("pass", "fail", "unknown") if v in by)
                )
        text = f"canary: {self.total} checks" + (f" ({', '.join(parts)})" if parts else "")
        if self.largest_typical is not None and self.gate is not None:
            text += (
                f"; largest passing disagreement {self.largest_typical:.3f} of the {self.gate:.3f}-nat gate"
            )
        return text


def _latest(records: list[CheckRecord | None]) -> CheckRecord | None:
    return max((r for r in records if r is not None), key=lambda r: r.at, default=None)


def merged(base: CanaryState, parts: dict[str, CanaryState]) -> CanaryState:
    """``base`` (the run's own fields: its settings, the fallback, the metrics URL, stopped) with
    what each engine's canary has seen (``parts``, by host:port): summed, the latest check, and
    each engine's own under ``replicas``."""
    out = base.model_copy(deep=True)
    states = list(parts.values())
    out.checks = {}
    for part in states:
        for where, by in part.checks.items():
            into = out.checks.setdefault(where, {})
            for verdict, n in by.items():
                into[verdict] = into.get(verdict, 0) + n
    out.last = _latest([p.last for p in states])
    out.last_fail = _latest([p.last_fail for p in states])
    out.last_pass_at = max((p.last_pass_at for p in states if p.last_pass_at is not None), default=None)
    typical = [p.largest_typical for p in states if p.largest_typical is not None]
    out.largest_typical = max(typical) if typical else None
    gates = [p.gate for p in states if p.gate is not None]
    out.gate = max(gates) if gates else None
    out.noise = next((p.noise for p in states if p.noise), "")
    out.probe_tokens = max((p.probe_tokens for p in states), default=0)
    out.canary_tokens = sum(p.canary_tokens for p in states)
    out.engine_tokens = sum(p.engine_tokens for p in states)
    seconds = [p.engine_prefill_s for p in states if p.engine_prefill_s is not None]
    out.engine_prefill_s = sum(seconds) if seconds else None
    if out.status not in ("fallback", "stopped"):
        waiting = [f"{name}: {p.waiting_for}" for name, p in parts.items() if p.status == "waiting"]
        if any(p.status == "watching" for p in states):
            out.status, out.waiting_for = "watching", ""
        elif waiting:
            out.status, out.waiting_for = "waiting", "; ".join(waiting)
    out.replicas = {
        name: ReplicaState(
            status=out.status if out.status in ("fallback", "stopped") else p.status,
            waiting_for=p.waiting_for,
            gate=p.gate,
            checks=p.checks,
            last=p.last,
            last_pass_at=p.last_pass_at,
            last_fail=p.last_fail,
            canary_tokens=p.canary_tokens,
            engine_tokens=p.engine_tokens,
        )
        for name, p in parts.items()
    }
    return out


class CanaryFiles:
    """The run dir's canary.json and events.jsonl."""

    def __init__(self, run_dir: Path) -> None:
        self.state_path = run_dir / CANARY_JSON
        self.events_path = run_dir / EVENTS_JSONL

    def write(self, state: CanaryState) -> None:
        state.updated_at = time.time()
        skip = None if state.replicas else {"replicas"}  # one engine: the file as it always was
        atomic_write(self.state_path, state.model_dump_json(indent=1, exclude=skip) + "\n")

    def event(self, kind: str, **fields: object) -> None:
        line = json.dumps({"at": round(time.time(), 3), "kind": kind, **fields}, default=str) + "\n"
        fd = os.open(self.events_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)


def read_state(run_dir: Path) -> CanaryState | None:
    """The run's canary state, or None when it has none (or it cannot be read)."""
    try:
        return CanaryState.model_validate_json((run_dir / CANARY_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
