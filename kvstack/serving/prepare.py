"""Everything ``serve`` decides before anything starts: snapshot, Plan, one LaunchSpec per engine.

One ``prepare`` for every launch: N >= 1 engines (``--replicas``, one by default) rendered from one
Plan, and vllm-router in front of them with ``--router``. Nothing here starts a process or writes
a file, so ``--dry-run`` is this function plus printing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvstack.clients.control import new_token
from kvstack.engines.facts import gather_facts
from kvstack.engines.render import render
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.source import ModelSource
from kvstack.planning.plan import PlanRequest, SizingTrace
from kvstack.planning.replicas import device_groups, replica_snapshot
from kvstack.planning.schema import Plan
from kvstack.remoteurl import RemoteURL
from kvstack.runtime.specs import LaunchSpec, ServeOptions
from kvstack.runtime.writable import require_writable_dir
from kvstack.serving.engine_args import with_engine_args
from kvstack.serving.engine_check import resolve_for_engine
from kvstack.serving.plan_inputs import load_or_probe, tuned_file
from kvstack.serving.planner import plan_for_model, require_feasible
from kvstack.serving.ports import PortLayout, port_layout
from kvstack.serving.replicas import on_devices, replica_dir, replica_request, replica_warning, visible_gpus
from kvstack.serving.request import ServeRequest, engine_python
from kvstack.serving.router import render_router, replica_tree_tokens


@dataclass(frozen=True)
class PreparedServe:
    """One engine with its helpers (LMCache's cache server): one replica of a Launch."""

    request: ServeRequest
    snapshot: HardwareSnapshot
    plan: Plan
    options: ServeOptions
    spec: LaunchSpec
    tuned: dict[str, str] | None = None  # --tuned: which kvstack tune chose the layout (TunedLayout.record)

    @property
    def run_dir(self) -> Path:
        return Path(self.options.run_dir)

    def record(self) -> dict[str, Any]:
        """launch.json: what runs, secrets masked, and the tune that chose the layout (--tuned)."""
        return {**self.spec.public(), **({"tuned": self.tuned} if self.tuned is not None else {})}

    def dry_run_document(self) -> dict[str, Any]:
        """What would run, secrets masked: {"plan", "argv", "env", "files", ...}."""
        return {"plan": self.plan.model_dump(mode="json"), **self.record()}


def plan_request_of(request: ServeRequest, remote: RemoteURL | None = None) -> PlanRequest:
    """What ``request`` asks the planner for (kvstack/serving/plan_inputs.py checks and parses it),
    with ``remote``, its remote URL parsed where it entered (``ServeRequest.remote``), and what its
    engine arguments set that the plan must know (serving/engine_args.py)."""
    asked = request.plan_request(remote, request.resolved_cache_root())
    return with_engine_args(asked, request.extra_args)


def plan_for(
    asked: PlanRequest,
    workload: str | None,
    snapshot: HardwareSnapshot,
    source: ModelSource,
    trace: SizingTrace | None = None,
) -> Plan:
    """The Plan ``serve`` launches (sized from ``trace`` when given); an infeasible one raises
    PlanInfeasible."""
    return require_feasible(plan_for_model(asked, source, workload, snapshot, trace), source.path)


def run_token(request: ServeRequest) -> str | None:
    """A fresh control token for a launch: one for all its replicas, their cache servers and its
    router (the router passes it to the replicas as the bearer of what it forwards)."""
    del request  # every engine kvstack serves takes one
    return new_token()


def serve_options(
    request: ServeRequest,
    *,
    remote: RemoteURL | None = None,
    port: int | None = None,
    run_dir: str | None = None,
    lmcache_port: int | None = None,
    lmcache_http_port: int | None = None,
    control_token: str | None = None,
) -> ServeOptions:
    """The options of one launch (``remote``: the request's); the port, run dir and LMCache
    ports are a replica's (None: the request's port and run dir, LMCache's defaults), the control
    token the launch's (None: a fresh one)."""
    return ServeOptions(
        host=request.host,
        port=request.port if port is None else port,
        api_key=request.api_key,
        cache_root=str(request.resolved_cache_root()),
        run_dir=str(request.resolved_run_dir()) if run_dir is None else run_dir,
        python=engine_python(),
        extra_args=list(request.extra_args),
        remote=remote,
        # Dev mode only for the validation pass (its prefix cache reset); a token per launch that
        # kvstack alone holds for whatever control route answers (kvstack/clients/control.py).
        dev_mode=request.validate_after_start,
        control_token=control_token if control_token is not None else run_token(request),
        lmcache_port=lmcache_port,
        lmcache_http_port=lmcache_http_port,
    )


@dataclass(frozen=True)
class Launch:
    """What ``serve`` starts: N >= 1 engines from one Plan, and optionally a router in front."""

    request: ServeRequest
    snapshot: HardwareSnapshot
    plan: Plan  # what every replica runs, planned for one replica's share of the machine
    layout: PortLayout
    run_dir: Path  # plan.json, launch.json, validation.json (and router.log); replica-<i>/ below
    replicas: tuple[PreparedServe, ...]
    router: LaunchSpec | None = None

    @property
    def multi(self) -> bool:
        return self.request.multi

    @property
    def front_url(self) -> str:
        """Where clients go: the router, or the first replica without one."""
        return self.router.base_url if self.router is not None else self.replicas[0].spec.base_url

    def dry_run_document(self) -> dict[str, Any]:
        """One engine: its plan and launch. Several: the first replica's fields at the top level
        (as for one engine), then every replica and the router."""
        first = self.replicas[0]
        if not self.multi:
            return first.dry_run_document()
        return {
            "plan": self.plan.model_dump(mode="json"),
            **first.record(),
            "front_url": self.front_url,
            "run_dir": str(self.run_dir),
            "port_layout": self.layout.to_dict(),
            "replicas": [
                {"index": i, "run_dir": p.options.run_dir, **p.spec.public()}
                for i, p in enumerate(self.replicas)
            ],
            "router": self.router.public() if self.router is not None else None,
        }


def prepare(
    request: ServeRequest,
    snapshot: HardwareSnapshot | None = None,
    env: Mapping[str, str] | None = None,
    trace: SizingTrace | None = None,
) -> Launch:
    """The launch ``request`` asks for; ``env`` (CUDA_VISIBLE_DEVICES) defaults to this process's;
    ``trace`` (serve --trace, read by the CLI) sizes the tiers and decides --offload auto."""
    # The one check of each port's range and of where each directory may be created, before
    # anything else, even when no tier uses the cache dir: a dry run must fail as the real run
    # would. The launch's preflight asks only what can change until then (a port taken, room).
    layout = port_layout(request.port, request.replicas, request.router)
    require_writable_dir(request.resolved_cache_root(), "--cache-dir")
    require_writable_dir(request.resolved_run_dir(), "--run-dir")
    remote = request.remote  # parsed where it entered: the plan takes its redacted form
    asked = plan_request_of(request, remote)  # bad input (--retain, --context, ...) fails before the probe
    tuned = (
        asked.tuned.record(str(tuned_file(request.tuned).resolve()))
        if asked.tuned is not None and request.tuned is not None
        else None
    )
    # Before the probe (seconds of fio): a model that is not there fails at once.
    source = resolve_for_engine(request.model_spec(), request.revision, asked.engine)
    machine = (
        snapshot
        if snapshot is not None
        else load_or_probe(request.hardware, request.resolved_cache_root(), request.fio_seconds)
    )
    n = request.replicas
    visible = visible_gpus(machine, os.environ if env is None else env)
    gpus_each = len(visible) // n if machine.gpus else 0
    snap = replica_snapshot(machine, n, gpus_each) if n > 1 else machine
    if n > 1:
        asked = asked.model_copy()
        asked.users = replica_request(request, machine, visible).users
    plan = plan_for(asked, request.workload, snap, source, trace)
    if n > 1:
        plan = plan.with_notes(warnings=[*plan.warnings, replica_warning(request, machine, gpus_each)])
    devices = (
        device_groups(plan.parallel.tensor_parallel_size, n, visible)
        if n > 1 and plan.platform == "cuda"
        else None
    )
    run_root = request.resolved_run_dir()
    facts = gather_facts(plan.model.path, snap.memory, revision=plan.model.revision, resolved=source)
    replicas: list[PreparedServe] = []
    token = run_token(request)
    for i, port in enumerate(layout.engine_ports):
        run_dir = replica_dir(run_root, i, request.multi)
        lmcache_port, lmcache_http_port = layout.helper_ports[i]
        options = serve_options(
            request,
            remote=remote,
            port=port,
            run_dir=str(run_dir),
            lmcache_port=lmcache_port,
            lmcache_http_port=lmcache_http_port,
            control_token=token,
        )
        spec = render(plan, options, snap.software, facts)
        if devices is not None:
            spec = on_devices(spec, devices[i])
        own = request.model_copy()
        own.port, own.run_dir, own.replicas, own.router = port, run_dir, 1, False
        replicas.append(
            PreparedServe(request=own, snapshot=machine, plan=plan, options=options, spec=spec, tuned=tuned)
        )
    router = None
    if request.router:
        router = render_router(
            layout,
            host=request.host,
            python=replicas[0].options.python,
            worker_urls=[p.spec.base_url for p in replicas],
            served_model_name=replicas[0].spec.served_model_name,
            api_key=request.api_key,
            control_token=token,
            tree_tokens=replica_tree_tokens(plan),
        )
    return Launch(
        request=request,
        snapshot=machine,
        plan=plan,
        layout=layout,
        run_dir=run_root,
        replicas=tuple(replicas),
        router=router,
    )
