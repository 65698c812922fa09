"""A per-request gate for LMCache's multi-process connector: loaded by vLLM, never by kvstack.

LMCache 0.5.6's ``LMCacheMPConnector`` looks up every request in its server and loads every hit
(lmcache/integration/vllm/lmcache_mp_connector.py:1225-1351): a prompt too short to gain from a
tier still pays the lookup's round trip before its prefill is scheduled. ``GatedLMCacheMPConnector``
is that connector with one rule in front: a request whose prompt is shorter than
``kv_connector_extra_config["kvstack.gate_prompt_tokens"]`` skips the lookup and the load, through
the connector's own bypass state (``BYPASS_LMCACHE``: zero external tokens; at the allocation that
follows it turns READY, lmcache_mp_connector.py:1416-1421), so its chunks are still stored for the
longer prompts after it. Everything else is the installed connector's.

vLLM loads it by ``kv_connector_module_path`` = this module and ``kv_connector`` =
``GatedLMCacheMPConnector`` (vllm/distributed/kv_transfer/kv_connector/factory.py:103-115);
engines/lmcache.py writes both when the plan carries a gate. The engine's Python imports kvstack
already (the guard middleware, engines/vllm_guard.py).
"""

from __future__ import annotations

from typing import Any

from lmcache.integration.vllm.lmcache_mp_connector import LMCacheMPConnector
from lmcache.integration.vllm.lmcache_mp_metadata import LMCacheMPRequestState

from kvstack.engines.lmcache import MP_GATE_KEY as GATE_KEY
from kvstack.jsonvalue import JsonObject


def gate_tokens(extra_config: JsonObject | None) -> int:
    """The gate's threshold in prompt tokens from the connector's extra config (0: no gate)."""
    value = (extra_config or {}).get(GATE_KEY, 0)
    tokens = int(value)
    if tokens < 0 or tokens != value:
        raise ValueError(f"{GATE_KEY} must be a whole number of tokens >= 0, not {value!r}")
    return tokens


class GatedLMCacheMPConnector(LMCacheMPConnector):  # type: ignore[misc]  # lmcache is untyped
    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self._kvstack_gate = gate_tokens(vllm_config.kv_transfer_config.kv_connector_extra_config)

    def _kvstack_gates(self, request: Any) -> bool:
        return self._kvstack_gate > 0 and int(request.num_prompt_tokens) < self._kvstack_gate

    def on_new_request(self, request: Any) -> None:
        if self._kvstack_gates(request):
            return  # no eager lookup either
        super().on_new_request(request)

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int | None, bool]:
        if not self._kvstack_gates(request):
            return super().get_num_new_matched_tokens(request, num_computed_tokens)  # type: ignore[no-any-return]
        tracker = self._get_or_create_request_tracker(request)
        if tracker.state == LMCacheMPRequestState.PREFETCHING:  # READY again at its allocation
            tracker.state = LMCacheMPRequestState.BYPASS_LMCACHE
        return 0, False
