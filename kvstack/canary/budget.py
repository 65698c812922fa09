"""The canary's cost, measured on the engine while it serves, and the budget that bounds it.

The cost of a check is prefill: the probe's plant (every token computed: the nonce leads), its
second asking (the part no cache covered) and the recompute that judges it (every token computed
again). The engine counts the prompt tokens it computed (vLLM's ``vllm:prompt_tokens_by_source``
with ``source="local_compute"``; without it, prompt tokens less prefix-cache and connector hits)
and the seconds it spent in prefill (``vllm:request_prefill_time_seconds``). The canary's share is
its computed tokens over the engine's since the canary started; a request is sent only when the
share after it stays within the budget (1% by default), so an idle server gets no checks and a
busy one gets them as often as the interval allows.
"""

from __future__ import annotations

from kvstack.clients import metrics as m
from kvstack.clients.metrics import MetricsSnapshot

PREFILL_TIME = "vllm:request_prefill_time_seconds_sum"
SGLANG_CACHED = "sglang:cached_tokens"


def computed_tokens(snap: MetricsSnapshot) -> float | None:
    """Prompt tokens the engine has computed (not read from a cache) since it started."""
    if snap.has(m.VLLM_PROMPT_TOKENS_BY_SOURCE, source="local_compute"):
        return snap.value(m.VLLM_PROMPT_TOKENS_BY_SOURCE, source="local_compute")
    if snap.has(m.VLLM_PROMPT_TOKENS):
        hits = snap.value(m.VLLM_PREFIX_HITS) + snap.value(m.VLLM_EXTERNAL_HITS)
        return max(0.0, snap.value(m.VLLM_PROMPT_TOKENS) - hits)
    if snap.has(m.SGLANG_PROMPT_TOKENS):
        return max(0.0, snap.value(m.SGLANG_PROMPT_TOKENS) - snap.value(SGLANG_CACHED))
    return None


def prefill_seconds(snap: MetricsSnapshot) -> float | None:
    return snap.get(PREFILL_TIME)


class Since:
    """A counter's growth since a baseline, across engine restarts (a restarted engine counts from 0)."""

    def __init__(self, base: float | None) -> None:
        self.base = base
        self.last = base
        self.carried = 0.0  # growth before the last restart
        self.value = 0.0

    def update(self, now: float | None) -> None:
        if now is None or self.base is None or self.last is None:
            return
        if now < self.last:
            self.carried, self.base = self.value, 0.0
        self.last = now
        self.value = self.carried + now - self.base


class PrefillBudget:
    """The canary's computed tokens against the engine's, from a baseline scrape."""

    def __init__(self, budget: float, start: MetricsSnapshot) -> None:
        self.budget = budget
        self.tokens = Since(computed_tokens(start))
        self.seconds = Since(prefill_seconds(start))
        self.spent = 0  # the canary's computed prompt tokens

    @property
    def measured(self) -> bool:
        return self.tokens.base is not None

    @property
    def engine(self) -> float:
        """Prompt tokens the engine computed since the baseline (the canary's included)."""
        return self.tokens.value

    @property
    def engine_seconds(self) -> float | None:
        return self.seconds.value if self.seconds.base is not None else None

    def update(self, snap: MetricsSnapshot) -> None:
        self.tokens.update(computed_tokens(snap))
        self.seconds.update(prefill_seconds(snap))

    def allows(self, tokens: int) -> bool:
        """May the canary have the engine compute ``tokens`` more? The share after it stays within
        the budget (the engine's count grows by the same tokens). Unmeasurable: the interval alone."""
        if not self.measured:
            return True
        return self.spent + tokens <= self.budget * (self.engine + tokens)

    def needed(self, tokens: int) -> float:
        """Tokens the engine must still compute for users before ``tokens`` fit the budget."""
        if not self.measured or self.budget <= 0:
            return 0.0
        return max(0.0, (self.spent + tokens) / self.budget - tokens - self.engine)

    def spend(self, tokens: int) -> None:
        self.spent += tokens
