"""``serve --replicas N [--router]``: how one request becomes N engines (serving.prepare uses it).

Every replica is rendered from the same Plan with the same software and model facts, so all
share one fingerprint: the same cache namespace under the disk tier's directory and the same
keys in the remote tier, where a prefix one replica computed is a hit for every other. Each
gets its own ports (serving.ports), run directory (RUN_DIR/replica-<i>) and, on a GPU machine,
its own GPUs (CUDA_VISIBLE_DEVICES). The Plan is made for one replica's share of the machine
(planning.replicas.replica_snapshot: 1/N of the GPUs, usable memory and free disk space; 1/N of
--users), so the N engines together fit it. Nothing here starts a process or writes a file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from kvstack.errors import UnsupportedError
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.runtime.specs import LaunchSpec, ProcessSpec
from kvstack.serving.request import ServeRequest


def replica_dir(run_dir: Path, index: int, multi: bool) -> Path:
    """Replica ``index``'s run directory: the run dir itself for one engine without a router."""
    return run_dir / f"replica-{index}" if multi else run_dir


def visible_gpus(snapshot: HardwareSnapshot, env: Mapping[str, str]) -> list[str]:
    """CUDA_VISIBLE_DEVICES entries kvstack may hand out: the inherited list (the user's choice
    of GPUs) when there is one, else every GPU of the snapshot by index."""
    inherited = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if inherited:
        return [d.strip() for d in inherited.split(",") if d.strip()]
    return [str(g.index) for g in snapshot.gpus]


def total_users(request: ServeRequest) -> int:
    """--users, else the workload profile's users, else 1 (what the single-engine plan would use)."""
    if request.users is not None:
        return request.users
    if request.workload is not None:
        from kvstack.serving.workload_files import load_workload

        return load_workload(request.workload).users
    return 1


def replica_request(request: ServeRequest, snapshot: HardwareSnapshot, visible: list[str]) -> ServeRequest:
    """The request one replica is planned for: its share of --users (rounded up) and of the GPUs."""
    n = request.replicas
    if snapshot.gpus and len(visible) < n * (request.tp or 1):
        tp = f" with --tp {request.tp}" if request.tp else ""
        fit = len(visible) // (request.tp or 1)
        raise UnsupportedError(
            f"--replicas {n}{tp} needs {n * (request.tp or 1)} GPUs; {len(visible)} visible",
            hint=f"use --replicas {fit} or less" if fit else "lower --tp",
        )
    out = request.model_copy()
    out.users = math.ceil(total_users(request) / n)
    return out


def replica_warning(request: ServeRequest, snapshot: HardwareSnapshot, gpus_each: int) -> str:
    n = request.replicas
    gpus = f"{gpus_each} of {len(snapshot.gpus)} GPUs, " if snapshot.gpus else ""
    total = total_users(request)
    users = math.ceil(total / n)
    return (
        f"planned per replica: {n} replicas share this machine, each with {gpus}1/{n} of its usable memory "
        f"and free disk space, and {users} of the {total} --users"
    )


def on_devices(spec: LaunchSpec, devices: list[str]) -> LaunchSpec:
    """``spec`` with every process pinned to ``devices`` (helpers too: LMCache maps GPU memory)."""
    value = ",".join(devices)

    def pin(p: ProcessSpec) -> ProcessSpec:
        return p.with_command(env={**p.env, "CUDA_VISIBLE_DEVICES": value})

    return spec.with_processes(
        server=pin(spec.server),
        helpers=[pin(h) for h in spec.helpers],
        note=f"GPUs {value} (CUDA_VISIBLE_DEVICES)",
    )
