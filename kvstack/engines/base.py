"""What rendering produces and the registry of renderers.

Rendering is pure: a Plan, the serve options and the installed software versions in, a
LaunchSpec out. Nothing is started or written here; ``serve`` writes ``files`` and hands the
spec to the supervisor, ``--dry-run`` prints ``LaunchSpec.public()``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from kvstack.hardware.snapshot import SoftwareInfo
from kvstack.planning.schema import Plan
from kvstack.runtime.specs import LaunchSpec, ServeOptions


class HostFacts(BaseModel):
    """Facts of this machine that rendering depends on, gathered once by ``engines.facts``.

    Kept out of rendering itself so that rendering stays pure and golden-testable.
    """

    model_config = ConfigDict(extra="forbid")

    model_local: bool = False  # plan.model.path is an existing directory or a cached hub snapshot
    model_has_weights: bool = True  # it holds *.safetensors / *.bin (else: dummy weights)
    model_config_sha256: str | None = None  # of its config.json, when local
    model_commit: str | None = None  # the Hugging Face cache snapshot a hub id resolves to
    # What vLLM calls the model (model_config.model), when it is not plan.model.path: offline, vLLM
    # replaces a hub id by its cache snapshot's directory. LMCache names its disk files after it.
    engine_model_name: str | None = None
    hub_token: str | None = Field(default=None, repr=False)  # the engine's HF token: masked in its log
    shm_free_bytes: int | None = None  # free space in /dev/shm (vLLM native offload maps it)


@dataclass(frozen=True)
class RenderRequest:
    """Everything a renderer reads; built once by ``engines.render.render``."""

    plan: Plan
    options: ServeOptions
    software: SoftwareInfo
    facts: HostFacts


Renderer = Callable[[RenderRequest], LaunchSpec]
_REGISTRY: dict[tuple[str, str], Renderer] = {}


def register(engine: str, connector: str) -> Callable[[Renderer], Renderer]:
    def deco(fn: Renderer) -> Renderer:
        _REGISTRY[(engine, connector)] = fn
        return fn

    return deco


def registered() -> dict[tuple[str, str], Renderer]:
    return dict(_REGISTRY)


# What an engine's installed version leaves open that serve must say (None: nothing), by engine:
# registered by the engine's renderer module, beside the launch it says it of.
Warner = Callable[[SoftwareInfo], "str | None"]
_WARNERS: dict[str, Warner] = {}


def warns(engine: str) -> Callable[[Warner], Warner]:
    def deco(fn: Warner) -> Warner:
        _WARNERS[engine] = fn
        return fn

    return deco


def warner(engine: str) -> Warner | None:
    return _WARNERS.get(engine)
