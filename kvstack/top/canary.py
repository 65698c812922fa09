"""The run's canary as `kvstack top` shows it: canary.json (canary/state.py) -> a CanaryView.

The canary writes its state after every check and every change of status, so the file is read at
each window's end; seconds since the last pass are counted to that moment. Nothing is scraped.
"""

from __future__ import annotations

import time

from kvstack.canary.state import CanaryState
from kvstack.top.snapshot import CanaryView, FallbackView


def canary_view(state: CanaryState, now: float) -> CanaryView:
    fb = state.fallback
    fail = state.last_fail
    return CanaryView(
        status=state.status,
        waiting_for=state.waiting_for if state.status == "waiting" else "",
        summary=state.summary(),
        checks=state.total,
        failed=state.count("fail"),
        gate_nats=state.gate,
        last_pass_at=state.last_pass_at,
        seconds_since_pass=max(0.0, now - state.last_pass_at) if state.last_pass_at is not None else None,
        prefill_share=state.share,
        budget=state.budget,
        share_line=state.share_line(),
        on_wrong_kv=state.on_wrong_kv,
        interval_s=state.interval_s,
        updated_at=state.updated_at,
        metrics_url=state.metrics_url,
        last_fail_at=fail.at if fail is not None else None,
        last_fail_served_from=fail.served_from if fail is not None else None,
        last_fail_detail=fail.detail if fail is not None else None,
        fallback=(
            FallbackView(
                at=fb.at,
                action=fb.action,
                served_from=fb.served_from,
                detail=fb.detail,
                tiers_off=list(fb.tiers_off),
                restarted=fb.restarted,
            )
            if fb is not None
            else None
        ),
    )


def clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def canary_warnings(c: CanaryView) -> list[str]:
    """A failed check the run did not act on yet (the action is recorded right after the check)."""
    if c.failed and c.fallback is None and c.last_fail_at is not None:
        return [
            f"the canary found wrong KV at {clock(c.last_fail_at)}: a check served from "
            f"{c.last_fail_served_from!r} failed ({c.last_fail_detail or 'over the gate'})"
        ]
    return []
