"""The model families kvstack is proven on, one tiny config each (profiles/families/<name>.json).

scripts/make-family-models writes a checkpoint from each (seeded weights, the demo's tokenizer):
the family's own architecture and layer kinds at a size that starts in seconds on a CPU. The
tests plan them (unit), check vLLM's own KV figures against kvstack's, and serve them (e2e).
"""

from __future__ import annotations

import json

from kvstack.jsonvalue import JsonObject
from kvstack.profiles import profiles_dir

FAMILIES: dict[str, str] = {
    "gemma3": "Gemma 3: sliding-window layers interleaved with global ones",
    "gpt-oss": "gpt-oss: alternating sliding-window and full layers, attention sinks",
    "llama4": "Llama 4: chunked local attention and a global NoPE layer",
    "deepseek-v2": "DeepSeek-V2: MLA (a compressed latent per token)",
    "granitemoehybrid": "Granite 4: Mamba2 layers and attention",
    "nemotron-h": "Nemotron-H: Mamba2, MLP and attention layers",
    "qwen3-next": "Qwen3-Next: gated delta-net (linear attention) and gated attention",
}


def family_config(name: str) -> JsonObject:
    """The family's config.json as a dict."""
    config: JsonObject = json.loads((profiles_dir() / "families" / f"{name}.json").read_text())
    return config
