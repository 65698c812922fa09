"""The retention target: how much KV should stay cached for the users who come back.

The working set is what the concurrent users need warm now; the value of an offload tier is
mostly in what they come back to after their sessions left the fast tiers (a RAG document asked
about again tomorrow, an agent resuming, a system prompt shared by many tenants). LMCache's,
SGLang's and llm-d's deployment recipes size the disk tier to hold at least ten times the
average active sessions, so the default target is ten working sets. Pure functions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from kvstack.errors import InputError
from kvstack.planning.notes import Notes
from kvstack.planning.request import PlanRequest
from kvstack.planning.schema import Tier, Workload
from kvstack.units import fmt_bytes, parse_bytes

DEFAULT_RETAIN_FACTOR = 10.0


def parse_retain(text: str | int | float, what: str = "--retain") -> tuple[float | None, int | None]:
    """``10``, ``10x``, ``2.5`` -> (factor, None); ``2TB``, ``500GiB`` -> (None, bytes)."""
    if isinstance(text, bool):
        raise InputError(f"{what} must be a multiple or a size, not {text!r}", hint=f"e.g. {what} 10")
    if isinstance(text, int | float):
        factor = float(text)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*[xX]?\s*", text)
        if m is None:
            try:
                size = parse_bytes(text, what)
            except InputError as exc:
                raise InputError(
                    f"{what} must be a multiple of the working set (10, 10x) or a size (2TB, 500GiB), "
                    f"not {text!r}",
                    hint=f"e.g. {what} 10 or {what} 2TB",
                ) from exc
            if size <= 0:
                raise InputError(f"{what} must be a positive size, not {text!r}", hint=f"e.g. {what} 2TB")
            return None, size
        factor = float(m.group(1))
    if not math.isfinite(factor) or factor < 1:
        raise InputError(
            f"{what} {factor:g} keeps less than the working set",
            hint=f"use a multiple of at least 1 (e.g. {what} 10) or a size (e.g. {what} 2TB)",
        )
    return factor, None


def retention_target(working_set: int, request: PlanRequest, workload: Workload) -> tuple[int, str]:
    """(bytes that should stay cached, the sentence saying where the figure comes from)."""
    if request.retain_bytes is not None:
        return request.retain_bytes, f"{fmt_bytes(request.retain_bytes)} (--retain)"
    if request.retain_factor is not None:
        factor, origin = request.retain_factor, "--retain"
    elif workload.retain_bytes is not None:
        return workload.retain_bytes, f"{fmt_bytes(workload.retain_bytes)} (workload {workload.name})"
    elif workload.retain_factor is not None:
        factor, origin = workload.retain_factor, f"workload {workload.name}"
    else:
        factor = DEFAULT_RETAIN_FACTOR
        origin = "the default: offload recipes keep at least 10x the active sessions for returning users"
    target = math.ceil(working_set * factor)
    return target, f"{factor:g} x the working set = {fmt_bytes(target)} ({origin})"


def retention_note(retention: int, tiers: Sequence[Tier], notes: Notes) -> None:
    """Say whether the tiers (inclusive: the largest bounds what they hold) meet the target; a remote
    store of unknown size holds what its own memory limit allows."""
    held = max(t.size_bytes for t in tiers)
    if any(t.kind == "remote" and t.size_bytes == 0 for t in tiers) and held < retention:
        notes.reasons["retention"] += "; the remote store holds what its own memory limit allows"
        return
    if held >= retention:
        notes.reasons["retention"] += f"; the tiers hold it ({fmt_bytes(held)} in the largest)"
        return
    short = retention - held
    notes.reasons["retention"] += f"; the tiers hold {fmt_bytes(held)}, {fmt_bytes(short)} short"
    notes.warn(
        f"the tiers hold {fmt_bytes(held)} of the {fmt_bytes(retention)} retention target "
        f"({fmt_bytes(short)} short): returning users' older prefixes will be recomputed "
        "(a larger disk, --cache-dir on another disk, or --remote would hold more)"
    )
