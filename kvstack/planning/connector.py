"""Which KV connector moves blocks below the engine's pool: the one chooser for every platform.

What each connector is comes from its spec (``kvstack/connectors``): the engines and platforms it
runs on, whether it reaches a remote tier, --offload auto's order of preference, what it carries.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvstack.connectors import auto_order, offloading, spec_of
from kvstack.connectors.spec import ConnectorSpec
from kvstack.errors import UnsupportedError
from kvstack.model.geometry import ModelGeometry
from kvstack.names import Platform
from kvstack.planning.carriage import CarryDecision, carry, first_as_allocated, refuse_forced
from kvstack.planning.schema import Connector, Engine, OffloadChoice

Installed = Callable[[ConnectorSpec], bool]  # whether the environment has what a connector needs


def _everything(spec: ConnectorSpec) -> bool:
    del spec
    return True


@dataclass(frozen=True)
class ConnectorChoice:
    connector: Connector  # what the plan wires if any offload tier survives sizing
    reason: str
    decision: CarryDecision  # how it carries the model's layers
    cannot: str = ""  # why the connector --offload auto wanted cannot carry the model (planned none)


def auto_candidates(
    engine: Engine, remote_url: str | None, platform: Platform = "cuda", installed: Installed = _everything
) -> tuple[Connector, ...]:
    """The connectors --offload auto may take for ``engine`` on ``platform``, most preferred first."""
    return tuple(
        s.name for s in auto_order(engine, platform) if (remote_url is None or s.remote) and installed(s)
    )


def readmits_lower_hits(connector: str) -> bool:
    """Whether a block served from disk or remote is copied back into the DRAM tier."""
    return spec_of(connector).readmits_lower_hits


def _auto_reason(spec: ConnectorSpec, engine: Engine) -> str:
    skipped = [s for s in offloading(engine) if s.deprecated and s.name != spec.name]
    why = spec.reason + " (--offload auto)"
    for s in skipped:
        why += f"; {s.title} only when asked for (--offload {s.name}): {s.deprecated}"
    return why


def wanted_connector(
    engine: Engine,
    offload: OffloadChoice,
    remote_url: str | None,
    platform: Platform = "cuda",
    installed: Installed = _everything,
) -> tuple[Connector, str]:
    """The connector the plan uses if any offload tier survives sizing, and why.

    Raises UnsupportedError for a combination the engine or platform cannot run (e.g. SGLang with
    native, native without a GPU) and a remote tier the connector cannot reach.
    """
    if offload == "none":
        if remote_url:
            raise UnsupportedError(
                "--remote needs an offload connector, but --offload none turns offloading off",
                hint="drop --offload none or drop --remote",
            )
        return "none", spec_of("none").reason
    if offload == "auto":
        names = auto_candidates(engine, remote_url, platform, installed)
        if not names:
            return "none", "none: no connector --offload auto takes runs here"
        spec = spec_of(names[0])
        return spec.name, _auto_reason(spec, engine)
    spec = spec_of(offload)
    if engine not in spec.engines:
        others = ", ".join(s.name for s in offloading(engine))
        other = next(e for e in spec.engines if e != engine)
        takers = " / ".join(s.name for s in offloading(other) if engine not in s.engines)
        raise UnsupportedError(
            f"--offload {offload} does not work with {engine}; choose one of: auto, none, {others}",
            hint=f"--engine {other} for {takers}",
        )
    if platform not in spec.platforms:
        raise UnsupportedError(
            f"--offload {offload} needs an NVIDIA GPU (CUDA); none is visible",
            hint="use --offload none (or auto) on a CPU-only machine",
        )
    if remote_url and not spec.remote:
        raise UnsupportedError(
            f"a remote store needs LMCache; {offload} has no Redis/LMCache-server backend",
            hint=f"use --engine {engine} --offload lmcache-mp with --remote",
        )
    reason = spec.reason + (f"; {spec.deprecated}" if spec.deprecated else "")
    return spec.name, reason


def choose_connector(
    model: ModelGeometry,
    engine: Engine,
    offload: OffloadChoice,
    remote_url: str | None,
    platform: Platform,
    installed: Installed = _everything,
) -> ConnectorChoice:
    """The connector wanted, why, and how it carries the model's layers: --offload auto takes one that
    carries them as the engine allocates them where there is one, and none where nothing can; a
    forced one that cannot is refused (exit 2)."""
    wanted, why = wanted_connector(engine, offload, remote_url, platform, installed)
    decision = carry(model, wanted, platform)
    if offload == "auto" and wanted != "none" and decision.carriage != "as-allocated":
        better = first_as_allocated(model, auto_candidates(engine, remote_url, platform, installed), platform)
        if better is not None:
            why = (
                f"{better[0]}: carries {model.name}'s layers as vLLM allocates them, where {wanted} "
                f"would not ({decision.reason}) (--offload auto)"
            )
            wanted, decision = better
    if decision.carriage == "cannot":
        if offload != "auto":
            refuse_forced(model, wanted, decision)
        return ConnectorChoice(
            "none", f"none: {decision.reason}", carry(model, "none", platform), decision.reason
        )
    return ConnectorChoice(wanted, why, decision)


def install_warnings(engine: Engine, connector: Connector, versions: dict[str, str | None]) -> list[str]:
    """What is missing from the environment the snapshot describes (planning still proceeds)."""
    out: list[str] = []
    if versions.get(engine) is None:
        out.append(
            f"{engine} is not installed in the probed environment: serve needs it (pip install {engine})"
        )
    package = spec_of(connector).package
    if package is not None and versions.get(package) is None:
        title = spec_of(connector).package_title
        out.append(
            f"{title} is not installed in the probed environment: pip install {package} before serving"
        )
    return out
