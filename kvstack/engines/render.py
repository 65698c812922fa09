"""The one entry point of rendering: (Plan, ServeOptions, SoftwareInfo) -> LaunchSpec."""

from __future__ import annotations

# Imported for their @register side effect: one module per engine/connector.
from kvstack.engines import lmcache, native, sglang, vllm  # noqa: F401
from kvstack.engines.base import HostFacts, RenderRequest, registered, warner
from kvstack.engines.facts import gather_facts
from kvstack.engines.tier_kv import shares_a_tier, tier_kv
from kvstack.engines.versions import installed_versions
from kvstack.errors import UnsupportedError
from kvstack.hardware.snapshot import SoftwareInfo
from kvstack.planning.schema import Plan
from kvstack.runtime.specs import LaunchSpec, ServeOptions


def engine_warnings(engine: str, software: SoftwareInfo) -> list[str]:
    """What ``engine``'s installed version leaves open that serve must say."""
    fn = warner(engine)
    said = fn(software) if fn is not None else None
    return [said] if said is not None else []


def supported() -> list[tuple[str, str]]:
    """Every (engine, connector) pair with a renderer."""
    return sorted(registered())


def render(
    plan: Plan, options: ServeOptions, software: SoftwareInfo, facts: HostFacts | None = None
) -> LaunchSpec:
    """What ``serve`` will write and run for ``plan``; starts and writes nothing.

    ``facts`` (model directory contents, /dev/shm free space) come from ``engines.facts``;
    when omitted they are gathered here from ``plan.model.path`` with /dev/shm unknown.
    """
    renderer = registered().get((plan.engine, plan.transfer.connector))
    if renderer is None:
        pairs = ", ".join(f"{e}+{c}" for e, c in supported() if e == plan.engine)
        raise UnsupportedError(
            f"{plan.engine} with --offload {plan.transfer.connector} is not supported "
            f"(installed: {installed_versions(software)})",
            hint=f"choose one of: {pairs}",
        )
    if facts is None:
        facts = gather_facts(plan.model.path, revision=plan.model.revision)
    req = RenderRequest(plan=plan, options=options, software=software, facts=facts)
    spec = renderer(req)
    if shares_a_tier(req, spec):  # what this engine stores there as, for the tier's other writers
        spec.tier_kv = tier_kv(req, spec)
    return spec
