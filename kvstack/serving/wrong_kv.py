"""What serving does when the canary finds wrong KV: ``--on-wrong-kv fallback|stop|warn``.

- ``fallback`` (the default): every engine restarts without its offload tiers
  (engines/offload_drop.py), each unit's launch.json says so, and the tiers stay off for the rest of
  the run. Each tier directory gets a marker file naming what happened; a later ``kvstack serve``
  refuses a tier directory that holds one until a person empties it (``quarantined``), since its
  KV served a wrong answer once. Requests in flight when the engine stops fail; new ones wait for
  the engine to come back (about as long as its start), then are computed from scratch.
- ``stop``: kvstack stops serving (exit 1), naming the check.
- ``warn``: a warning, the metrics and the run dir say it; serving goes on unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kvstack.canary.runner import CanaryRunner
from kvstack.canary.state import CheckRecord, FallbackRecord
from kvstack.engines.offload_drop import without_offload
from kvstack.errors import WrongKvServed
from kvstack.serving.quarantine import mark_dirs
from kvstack.serving.remote_failover import restart_changed, units
from kvstack.validation.report import ValidationTarget


def describe(record: CheckRecord) -> str:
    where = "the engine's own cache" if record.served_from == "gpu" else f"{record.served_from!r}"
    on = f" on replica {record.replica}" if record.replica is not None else ""
    return (
        f"wrong KV: canary probe {record.probe}{on} served from {where} {record.age_s:.0f} s after it "
        f"was planted differs from recompute: {record.detail or 'typical disagreement over the gate'}"
    )


def act(
    record: CheckRecord,
    runner: CanaryRunner,
    sup: object,
    ready_timeout_s: float,
    warn: Callable[[str], None],
    say: Callable[[str], None],
) -> None:
    """One failed check, handled as the run's --on-wrong-kv says."""
    message = describe(record)
    action = runner.state.on_wrong_kv
    already = runner.state.fallback is not None and runner.state.fallback.tiers_off
    warn(message)
    replica = {"replica": record.replica} if record.replica is not None else {}
    if already:  # the tiers are off: the engine's own cache served it; nothing more to turn off
        runner.noted("wrong-kv-after-fallback", served_from=record.served_from, detail=message, **replica)
        return
    if action in ("warn", "stop"):
        runner.acted(
            FallbackRecord(
                at=time.time(),
                action=action,
                served_from=record.served_from,
                detail=message,
                replica=record.replica,
            )
        )
    if action == "warn":
        return
    if action == "stop":
        raise WrongKvServed(
            message,
            hint="kvstack stopped serving (--on-wrong-kv stop); the run dir's events.jsonl has every check",
        )
    runner.pause()
    tiers: list[str] = sorted({str(t.kind) for target in runner.targets.values() for t in target.tiers})
    marked: list[str] = []
    for unit in units(sup):
        if without_offload(unit.spec) is not None:  # the units the fallback restarts: their tiers
            marked += mark_dirs(sorted(set(unit.spec.cache_dirs.values())), record, unit.run_dir)
    restarted = restart_changed(sup, without_offload, ready_timeout_s)
    runner.acted(
        FallbackRecord(
            at=time.time(),
            action="fallback",
            served_from=record.served_from,
            detail=message,
            tiers_off=tiers,
            restarted=restarted,
            replica=record.replica,
        )
    )
    runner.retarget(_no_tiers)
    say(
        f"serving without the offload tiers ({', '.join(tiers) or 'none'}): {restarted} engine(s) restarted; "
        f"they stay off for this run (marked: {', '.join(marked) or 'no directory'})"
    )


def _no_tiers(target: ValidationTarget) -> ValidationTarget:
    """``target`` (a shallow copy) with no tier, cache server or connector: the engine's own /metrics."""
    out = target.model_copy()
    out.tiers, out.cache_server_url, out.connector = [], None, None
    out.metrics_urls = [target.base_url.rstrip("/") + "/metrics"]
    return out
