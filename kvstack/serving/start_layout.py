"""Layouts bench serves with tier sizes the user gives (``--l1-size``, ``--disk-size``).

The plan sizes LMCache's DRAM tier (at least 1 GiB) and the disk tier (at least 10 GiB) for
serving. A replay that checks a prediction, or a test that shows a cap holds, needs tiers small
enough to overflow: the same launch as ``serve`` (prepare, then launched), with the plan's offload
tiers resized before rendering, so the sizes reach the running servers exactly as planned sizes do
(``--l1-size-gb``, the disk adapter's ``max_capacity_gb`` and kvstack's disk bound).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from kvstack.engines.facts import gather_facts
from kvstack.engines.render import render
from kvstack.errors import InputError
from kvstack.names import OFFLOAD_CHOICES, OffloadChoice, choice
from kvstack.planning.schema import Plan
from kvstack.serving.lifecycle import ServeEvents, launched
from kvstack.serving.prepare import Launch, prepare
from kvstack.serving.request import ServeRequest
from kvstack.serving.request_checks import check_request
from kvstack.serving.served_layout import ServedLayout, StartLayout
from kvstack.units import GIB, fmt_bytes

# LMCache's --l1-size-gb is rendered in steps of 0.01 GiB (engines.launch_basics.gib_floor).
MIN_L1_BYTES = GIB // 100 + 1


@dataclass(frozen=True)
class TierOverrides:
    """Offload tier sizes (bytes, total) that replace the plan's; None keeps the plan's."""

    cpu_bytes: int | None = None  # LMCache's DRAM tier (L1)
    disk_bytes: int | None = None

    @property
    def empty(self) -> bool:
        return self.cpu_bytes is None and self.disk_bytes is None

    def check(self) -> None:
        if self.cpu_bytes is not None and self.cpu_bytes < MIN_L1_BYTES:
            raise InputError(
                f"--l1-size {fmt_bytes(self.cpu_bytes)} is below LMCache's smallest DRAM tier (0.01 GiB)",
                hint="e.g. --l1-size 64MiB",
            )
        if self.disk_bytes is not None and self.disk_bytes < 1:
            raise InputError("--disk-size must be positive", hint="e.g. --disk-size 8MiB")

    def to_dict(self) -> dict[str, int | None]:
        return {"cpu_bytes": self.cpu_bytes, "disk_bytes": self.disk_bytes}


def resized_plan(plan: Plan, sizes: TierOverrides) -> Plan:
    """``plan`` with its offload tiers (never the engine's own pool) resized."""
    wanted = {"cpu": sizes.cpu_bytes, "disk": sizes.disk_bytes}
    tiers = [plan.cache.tiers[0]] if plan.cache.tiers else []
    for tier in plan.offload_tiers:
        size = wanted.get(tier.kind)
        if size is None:
            tiers.append(tier)
            continue
        tokens = size // max(1, plan.cache.kv_bytes_per_token)
        reason = f"{fmt_bytes(size)}: set for this bench (was {fmt_bytes(tier.size_bytes)}: {tier.reason})"
        tiers.append(
            tier.resized(
                size_bytes=size,
                size_bytes_per_rank=size // plan.parallel.tensor_parallel_size,
                tokens=tokens,
                reason=reason,
            )
        )
    missing = [k for k, v in wanted.items() if v is not None and plan.tier(k) is None]  # type: ignore[arg-type]
    if missing:
        raise InputError(
            f"the layout has no {' or '.join(missing)} tier to resize (--offload {plan.transfer.connector})",
            hint="drop --l1-size/--disk-size, or bench a layout with those tiers (e.g. lmcache-mp)",
        )
    return plan.with_tiers(tiers)


def resized_launch(launch: Launch, sizes: TierOverrides) -> Launch:
    """The launch rendered again from the resized plan (one engine, as bench serves)."""
    if sizes.empty:
        return launch
    plan = resized_plan(launch.plan, sizes)
    replicas = []
    for p in launch.replicas:
        facts = gather_facts(plan.model.path, p.snapshot.memory, revision=plan.model.revision)
        spec = render(plan, p.options, p.snapshot.software, facts)
        replicas.append(dataclasses.replace(p, plan=plan, spec=spec))
    return dataclasses.replace(launch, plan=plan, replicas=tuple(replicas))


def measuring_request(
    request: ServeRequest,
    api_key: str | None,
    extra_args: list[str],
    model: str | None = None,
    run_dir: Path | None = None,
) -> ServeRequest:
    """What bench and tune serve each layout with: ``request`` completed with the API key and the
    engine arguments (and bench's own --model and --run-dir), without a validation pass, and refused
    where serve refuses it (on loopback it has nothing to warn about)."""
    served = request.completed(
        api_key=api_key, extra_args=extra_args, validate=False, model=model, run_dir=run_dir
    )
    check_request(served, dry_run=False)
    return served


def sized_layout_starter(
    base: ServeRequest,
    sizes: TierOverrides,
    events: ServeEvents | None = None,
    *,
    control_routes: bool = False,
) -> StartLayout:
    """``start_layout(name)``: serve ``base`` with ``--offload name`` and the tier sizes given.

    Layouts without the resized tiers (``none``) start as planned. ``control_routes`` keeps the
    engine's reset route (vLLM's dev mode, which serve turns on for its validation pass)."""
    run_root = base.resolved_run_dir()

    @contextmanager
    def start(name: str) -> Iterator[ServedLayout]:
        choice(name, OFFLOAD_CHOICES, "--offload")  # a layout is an --offload choice
        # prepare() turns vLLM's dev mode (the reset route) on only for a validation pass; nothing
        # here validates (launched() only starts), so the flag says whether the route is wanted.
        request = base.model_copy()
        request.offload = cast(OffloadChoice, name)  # an --offload choice: checked just above
        request.run_dir, request.validate_after_start = run_root / name, control_routes
        launch = prepare(request)
        if launch.plan.offloads:
            launch = resized_launch(launch, sizes)
        with launched(launch, events) as group:

            def check_alive() -> None:
                if group.poll_died() is not None:
                    raise group.death_error(during=f"the bench of layout {name}")

            spec = launch.replicas[0].spec
            yield ServedLayout(
                name,
                spec.base_url,
                tuple(spec.metrics_urls),
                check_alive,
                spec.served_model_name,
                cache_server_url=spec.cache_server_url,
                cache_dirs=dict(spec.cache_dirs),
                plan=launch.plan,
            )

    return start
