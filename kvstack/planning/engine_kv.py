"""What the plan says the engine's KV pool holds: the figure vLLM logs as "KV cache size: N
tokens", from the model's layers, the layout the plan chose and the pool's memory (model/kv_groups.py).
validation/kv_size.py checks it against the running engine."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from kvstack.model.geometry import ModelGeometry
from kvstack.model.kv_groups import (
    EngineKvParams,
    block_bytes,
    engine_kv_tokens,
    request_kv_bytes,
    tokens_for_blocks,
)
from kvstack.planning.dtype import dtype_bytes
from kvstack.planning.kv import plan_layout
from kvstack.planning.schema import Plan


class KvExpectation(BaseModel):
    """What the plan says the engine's KV pool holds, and the settings that decide it."""

    model_config = ConfigDict(extra="forbid")

    model: ModelGeometry
    dtype_bytes: float
    max_model_len: int
    hybrid_manager: bool
    block_size: int
    in_flight_tokens: int
    ssm_float32: bool = False  # the engine said it keeps the SSM state in float32
    prefix_caching: bool = True
    pool_bytes: int | None = None  # None: the memory the engine's log says it had (CUDA)
    num_blocks_override: int | None = None  # --num-gpu-blocks-override among the engine's arguments

    @property
    def engine(self) -> EngineKvParams:
        return EngineKvParams(self.block_size, self.in_flight_tokens, self.ssm_float32, self.prefix_caching)

    def tokens(self, pool_bytes: int) -> int:
        return engine_kv_tokens(
            self.model,
            pool_bytes,
            self.max_model_len,
            self.engine,
            hybrid_manager=self.hybrid_manager,
            dtype_bytes=self.dtype_bytes,
        )

    def block_bytes(self) -> float:
        return block_bytes(
            self.model, self.engine, hybrid_manager=self.hybrid_manager, dtype_bytes=self.dtype_bytes
        )

    def bytes_per_token(self) -> float:
        """KV bytes per context token of a max_model_len request, as the engine holds it."""
        per_request = request_kv_bytes(
            self.model,
            self.max_model_len,
            self.engine,
            hybrid_manager=self.hybrid_manager,
            dtype_bytes=self.dtype_bytes,
        )
        return per_request / self.max_model_len

    def tokens_for_blocks(self, num_blocks: int) -> int:
        return tokens_for_blocks(
            self.model, num_blocks, self.max_model_len, self.engine, hybrid_manager=self.hybrid_manager
        )


def kv_expectation(
    plan: Plan, pool_bytes: int | None, *, num_blocks_override: int | None = None
) -> KvExpectation:
    """The expectation for an engine started from ``plan`` with ``pool_bytes`` of KV space (None on
    CUDA: the engine's log says what it had)."""
    engine = plan_layout(
        plan.platform, plan.cache.hybrid_manager, plan.cache.kv_in_flight_tokens, plan.cache.prefix_caching
    ).engine
    return KvExpectation(
        model=plan.model.geometry,
        dtype_bytes=dtype_bytes(plan.cache.kv_cache_dtype, plan.model.geometry),
        max_model_len=plan.model.max_model_len,
        hybrid_manager=plan.cache.hybrid_manager != "off",
        block_size=engine.block_size,
        in_flight_tokens=engine.in_flight_tokens,
        pool_bytes=pool_bytes,
        num_blocks_override=num_blocks_override,
        prefix_caching=plan.cache.prefix_caching,
    )
