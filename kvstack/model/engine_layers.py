"""A model's layers as the engine reports them: ``ModelGeometry`` corrected by ``EngineKvSpec``.

kvstack's config reader (model/layers.py) knows the families someone listed; vLLM's own spec knows
every layer it would build: a layer that reads another's KV (Gemma 3n's shared layers) holds
nothing, a layer that runs attention and a state-space mixer side by side (Falcon-H1) is one
attention layer and one state layer, a short convolution (LFM2) is a state of its own shape.
"""

from __future__ import annotations

import math

from kvstack.model.engine_spec import EngineKvSpec, SpecGroup
from kvstack.model.geometry import ModelGeometry
from kvstack.model.layers import StateShape

_STATE_KINDS = {"MAMBA1": "mamba1", "MAMBA2": "mamba2", "SHORT_CONV": "short_conv", "GDN": "gdn"}


def _state_shape(group: SpecGroup) -> StateShape:
    """One state layer's shape from the engine's spec: the conv state first, the SSM state after."""
    shapes = group.state_shapes or ()
    dtypes = group.state_dtypes or ()
    kind = next((v for k, v in _STATE_KINDS.items() if k in (group.mamba_type or "").upper()), "mamba2")
    return StateShape(
        kind=kind,  # type: ignore[arg-type]
        conv_elements=math.prod(shapes[0]) if shapes else 0,
        ssm_elements=sum(math.prod(s) for s in shapes[1:]),
        ssm_float32=len(dtypes) > 1 and dtypes[1] == "float32",
    )


def apply_engine_spec(
    model: ModelGeometry, spec: EngineKvSpec, *, blocks_checked: bool = True
) -> ModelGeometry:
    """``model`` with its layer kinds, windows, bytes per token and state shape from the engine's
    groups (hybrid KV cache manager on: every kind in its own groups). A refusal changes nothing.
    ``blocks_checked`` False: the plan is for another platform than the probe's, whose block sizes
    kvstack estimates (model/kv_groups.py), the layer kinds still the engine's."""
    layout = spec.manager_on
    if not spec.ok or layout is None or not layout.ok:
        return model
    full = layout.layers("full", "mla")
    sliding = layout.layers("sliding")
    chunked = layout.layers("chunked")
    state_groups = [g for g in layout.groups if g.kind == "state"]
    windows = [g.sliding_window for g in layout.groups if g.kind == "sliding" and g.sliding_window]
    chunks = [g.attention_chunk for g in layout.groups if g.kind == "chunked" and g.attention_chunk]
    per_layer = next((g.bytes_per_token for g in layout.groups if g.bytes_per_token), 0)
    window = min(windows) if windows else None
    out = model.model_copy()
    out.full_attention_layers = full
    out.kv_bytes_per_token = (
        sum(g.layers * g.bytes_per_token for g in layout.groups if g.kind in ("full", "mla"))
        or full * per_layer
    )
    out.sliding_layers, out.sliding_window = sliding, window
    out.sliding_kv_bytes_per_sequence = sliding * per_layer * (window or 0)
    out.chunked_layers, out.attention_chunk = chunked, min(chunks) if chunks else None
    out.state_layers = sum(g.layers for g in state_groups)
    out.state = _state_shape(state_groups[0]) if state_groups else None
    out.layer_kinds_source = spec.source()
    out.engine_spec = spec if blocks_checked else spec.unchecked()
    return out
