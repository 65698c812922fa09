"""``serve --replicas N [--router]``: N engines from one Plan, and optionally a router in front.

Every replica is rendered from the same Plan with the same software and model facts, so all
share one fingerprint: the same cache namespace under the disk tier's directory and the same
keys in the remote tier, where a prefix one replica computed is a hit for every other. Each
gets its own ports (serving.ports), run directory (RUN_DIR/replica-<i>) and, on a GPU machine,
its own GPUs (CUDA_VISIBLE_DEVICES). The Plan is made for one replica's share of the machine
(planning.replicas.replica_snapshot: 1/N of the GPUs, usable memory and free disk space; 1/N of
--users), so the N
engines together fit it. Like ``prepare``, nothing here starts a process or writes a file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvstack.engines.base import LaunchSpec, ProcessSpec
from kvstack.engines.facts import gather_facts
from kvstack.engines.render import render
from kvstack.errors import UnsupportedError
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.planning.replicas import device_groups, replica_snapshot
from kvstack.planning.schema import Plan
from kvstack.serving.ports import PortLayout, port_layout
from kvstack.serving.prepare import PreparedServe, hardware_snapshot, plan_for, serve_options
from kvstack.serving.request import ServeRequest
from kvstack.serving.router import render_router


def replica_dir(run_dir: Path, index: int) -> Path:
    return run_dir / f"replica-{index}"


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
        from kvstack.planning.workload import load_workload

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
    return request.model_copy(update={"users": math.ceil(total_users(request) / n)})


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
        return p.model_copy(update={"env": {**p.env, "CUDA_VISIBLE_DEVICES": value}})

    return spec.model_copy(
        update={
            "server": pin(spec.server),
            "helpers": [pin(h) for h in spec.helpers],
            "notes": [*spec.notes, f"GPUs {value} (CUDA_VISIBLE_DEVICES)"],
        }
    )


@dataclass(frozen=True)
class ReplicaSet:
    request: ServeRequest
    snapshot: HardwareSnapshot
    plan: Plan  # what every replica runs, planned for one replica's share of the machine
    layout: PortLayout
    run_dir: Path  # plan.json, launch.json, validation.json, router.log; replica-<i>/ below
    replicas: tuple[PreparedServe, ...]
    router: LaunchSpec | None = None

    @property
    def front_url(self) -> str:
        """Where clients go: the router, or the first replica without one."""
        return self.router.base_url if self.router is not None else self.replicas[0].spec.base_url

    def dry_run_document(self) -> dict[str, Any]:
        """The first replica's fields at the top level (as for one engine), then every replica."""
        first = self.replicas[0].spec.public()
        return {
            "plan": self.plan.model_dump(mode="json"),
            **first,
            "front_url": self.front_url,
            "run_dir": str(self.run_dir),
            "port_layout": self.layout.to_dict(),
            "replicas": [
                {"index": i, "run_dir": p.options.run_dir, **p.spec.public()}
                for i, p in enumerate(self.replicas)
            ],
            "router": self.router.public() if self.router is not None else None,
        }


def prepare_replicas(
    request: ServeRequest, snapshot: HardwareSnapshot | None = None, env: Mapping[str, str] | None = None
) -> ReplicaSet:
    layout = port_layout(request.port, request.replicas, request.router)
    machine = snapshot if snapshot is not None else hardware_snapshot(request)
    n = request.replicas
    visible = visible_gpus(machine, os.environ if env is None else env)
    gpus_each = len(visible) // n if machine.gpus else 0
    planned = replica_request(request, machine, visible)
    snap = replica_snapshot(machine, n, gpus_each) if n > 1 else machine
    plan = plan_for(planned, snap)
    if n > 1:
        plan = plan.model_copy(
            update={"warnings": [*plan.warnings, replica_warning(request, machine, gpus_each)]}
        )
    devices = (
        device_groups(plan.tensor_parallel_size, n, visible) if n > 1 and plan.platform == "cuda" else None
    )
    run_root = request.resolved_run_dir()
    facts = gather_facts(plan.model_path, snap.memory, revision=plan.model_revision)
    replicas: list[PreparedServe] = []
    for i, port in enumerate(layout.engine_ports):
        run_dir = replica_dir(run_root, i)
        lmcache_port, lmcache_http_port = layout.helper_ports[i]
        options = serve_options(
            request,
            port=port,
            run_dir=str(run_dir),
            lmcache_port=lmcache_port,
            lmcache_http_port=lmcache_http_port,
        )
        spec = render(plan, options, snap.software, facts)
        if devices is not None:
            spec = on_devices(spec, devices[i])
        own = request.model_copy(update={"port": port, "run_dir": run_dir, "replicas": 1, "router": False})
        replicas.append(PreparedServe(request=own, snapshot=machine, plan=plan, options=options, spec=spec))
    router = None
    if request.router:
        router = render_router(
            layout,
            host=request.host,
            python=replicas[0].options.python,
            worker_urls=[p.spec.base_url for p in replicas],
            served_model_name=replicas[0].spec.served_model_name,
            api_key=request.api_key,
        )
    return ReplicaSet(
        request=request,
        snapshot=machine,
        plan=plan,
        layout=layout,
        run_dir=run_root,
        replicas=tuple(replicas),
        router=router,
    )
