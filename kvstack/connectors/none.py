"""``none``: no connector; the engine's own GPU prefix cache and nothing below it."""

from __future__ import annotations

from kvstack.connectors.spec import ConnectorSpec

SPEC = ConnectorSpec(
    name="none",
    title="no offload connector",
    engines=("vllm", "sglang"),
    platforms=frozenset({"cuda", "cpu"}),
    tiers=frozenset(),
    reason="--offload none: the GPU prefix cache only",
    # Every format that runs the engine (the LMCache operator wires only LMCache into it).
    exports=frozenset({"helm", "compose", "systemd", "kserve", "llm-d"}),
    tune_platforms=frozenset({"cuda", "cpu"}),
)
