"""Every check before a launch, in one place: nothing is written or started until all pass.

The model first, then local paths, then ports, the router, the engine (runtime.preflight), and last
the remote store, whose check is a network round trip; then the warnings and notes a launch that
passed says.
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

from kvstack.connectors.engines import engine_spec
from kvstack.engines.render import engine_warnings
from kvstack.errors import NetworkTargetError
from kvstack.fsutil import check_private_dir
from kvstack.model import hub
from kvstack.runtime.preflight import check_port_free, preflight_launch
from kvstack.serving.prepare import Launch, PreparedServe
from kvstack.serving.quarantine import quarantined
from kvstack.serving.router import require_router


def disk_need_bytes(prepared: PreparedServe) -> int:
    disk = prepared.plan.tier("disk")
    return disk.size_bytes if disk is not None else 0


def private_dirs(prepared: PreparedServe) -> list[Path]:
    """Directories that hold users' KV or configs: the cache root, every cache dir below it, the run dir."""
    root = Path(prepared.options.cache_root)
    out = [root, prepared.run_dir]
    for directory in map(Path, prepared.spec.private_dirs):
        # The namespace directories between the root and the tier directory count too.
        out += [p for p in (directory, *directory.parents) if p == directory or root in p.parents]
    return list(dict.fromkeys(out))


def require_model_files(prepared: PreparedServe) -> None:
    """A Hugging Face id's weights are in the cache or the hub answers: else the engine fails late.

    Skipped when the engine arguments ask for dummy weights (the engine then needs none).
    """
    model, extra = prepared.plan.model.path, prepared.options.extra_args
    dummy = "--load-format=dummy" in extra or any(
        a == "--load-format" and b == "dummy" for a, b in itertools.pairwise(extra)
    )
    if hub.is_hub_id(model) and not Path(model).is_dir() and not dummy:
        hub.require_weights(model, prepared.plan.model.revision)


def bound_ports(launch: Launch) -> list[int]:
    """Every port a process of the launch binds; a port bound twice is an error, not a race."""
    ports = [port for p in launch.replicas for port in p.spec.ports]
    ports += launch.router.ports if launch.router is not None else []
    twice = sorted(port for port, n in Counter(ports).items() if n > 1)
    if twice:
        raise NetworkTargetError(
            f"port {twice[0]} would be bound by two processes of this launch",
            hint="choose another --port (the layout is in kvstack/serving/ports.py)",
        )
    return ports


def preflight(launch: Launch) -> None:
    """Every check before a launch, in the order a user would fix them; nothing is written or started.

    The model first, then local paths, then ports, the router, the engine (runtime.preflight), and
    last the remote store, whose check is a network round trip.
    """
    first = launch.replicas[0]
    require_model_files(first)
    check_private_dir(launch.run_dir, "--run-dir")
    for p in launch.replicas:
        for directory in private_dirs(p):
            check_private_dir(directory, "--run-dir" if directory == p.run_dir else "--cache-dir")
    for tier_dir in sorted({d for p in launch.replicas for d in p.spec.cache_dirs.values()}):
        quarantined(Path(tier_dir))
    own = set(first.spec.ports)  # preflight_launch checks the first replica's
    for port in bound_ports(launch):
        if port not in own:
            check_port_free(launch.request.host, port)
    if launch.router is not None:
        require_router(first.options.python)
    # The replicas' disk tiers share one directory: it needs room for all of them.
    preflight_launch(first.spec, first.options, disk_need_bytes(first) * len(launch.replicas))
    if first.options.remote is not None and launch.plan.tier("remote") is not None:
        # Lazy: redis-py is needed only when a remote tier is asked for.
        from kvstack.remote.preflight import require_reachable

        require_reachable(first.options.remote)


def launch_warnings(launch: Launch) -> list[str]:
    """The plan's warnings, then what the launch leaves open that a user must know about."""
    warnings = list(launch.plan.warnings)
    # An engine too old to lock its admin routes: refused on a public bind (rendering), served on
    # loopback with this said.
    warnings += engine_warnings(launch.request.engine, launch.snapshot.software)
    return warnings


def launch_notes(launch: Launch) -> list[str]:
    """What the launch leaves off, and why, said once its preflight passed."""
    req, notes = launch.request, []
    if not req.validate_after_start and engine_spec(req.engine).guard_in_process:
        notes.append(
            "--no-validate: vLLM's development endpoints (/reset_prefix_cache, /collective_rpc, /sleep, "
            "...) stay off, nothing in this run needs them; the other control routes answer kvstack only"
        )
    if req.validate_after_start and launch.replicas[0].spec.reset_cache_path is None:
        notes.append(
            f"--host {req.host} is not loopback: the engine's endpoints that drop its prefix cache "
            "are off, so validation forces the tiers by overflowing its pool (and, with LMCache's cache "
            "server, by emptying its DRAM through its loopback-only API)"
        )
    return notes
