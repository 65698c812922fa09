"""Restart a serving unit without its remote tier (Redis hung: kvstack/serving/remote_watch.py).

Each engine whose LMCache cache server reaches Redis is restarted, cache server then engine, as a
dead cache server's unit is (Supervisor.restart), with the server rendered without its `resp`
adapter (kvstack/engines/remote_drop.py). This happens at most once per run and does not spend the
restart budget, which counts deaths: it is a change of configuration that cannot repeat.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvstack.engines.remote_drop import without_remote_tier
from kvstack.runtime.specs import LaunchSpec
from kvstack.runtime.supervisor import Supervisor
from kvstack.serving.launch_files import record_replica_spec
from kvstack.serving.remote_watch import RemoteWatch


def units(sup: object) -> Sequence[Supervisor]:
    """The supervisors serving watches: a group's members, or the one supervisor."""
    members = getattr(sup, "members", None)
    if members is not None:
        return list(members)
    return [sup] if isinstance(sup, Supervisor) else []


def restart_changed(
    sup: object, change: Callable[[LaunchSpec], LaunchSpec | None], ready_timeout_s: float
) -> int:
    """Restart every unit ``change`` gives another spec (None: leave it), with that spec; how many
    were restarted. Each unit's launch.json is rewritten to what now runs, and a replica run's
    top-level launch.json with it (a reader of the run dir, top included, sees what runs)."""
    n = 0
    for unit in units(sup):
        spec = change(unit.spec)
        if spec is None:
            continue
        unit.spec = spec
        unit.restart(ready_timeout_s)
        record_replica_spec(unit.run_dir, spec)
        n += 1
    return n


def restart_without_remote(sup: object, ready_timeout_s: float) -> int:
    """Restart every unit that reaches Redis without it; how many were restarted."""
    return restart_changed(sup, without_remote_tier, ready_timeout_s)


def follow_remote(
    watch: RemoteWatch,
    sup: object,
    warn: Callable[[str], None],
    say: Callable[[str], None],
    ready_timeout_s: float,
) -> None:
    """One step of serving's loop: pass on what the watch saw; drop the tier when it asks."""
    for change in watch.changes():
        warn(change)
    if not watch.drop_requested():
        return
    n = restart_without_remote(sup, ready_timeout_s)
    if n:
        say(f"serving again without the remote tier ({n} engine(s) restarted)")
    else:  # in-process LMCache: its remote backend is no L2 adapter kvstack can render away
        warn("this engine's remote tier cannot be dropped while serving: requests wait for the store")
