"""The canary's prefill budget: the engine's computed prompt tokens read from its counters (vLLM's
and SGLang's names, rendered by prometheus_client), across restarts, and the share it bounds."""

from __future__ import annotations

import math
import random

from kvstack.canary.budget import PrefillBudget, Since, computed_tokens, prefill_seconds
from kvstack.clients.metrics import MetricsSnapshot
from tests.unit.canary.counters import SGLANG, VLLM, Exporter

URL = "http://127.0.0.1:8000/metrics"


def vllm_engine(by_source: bool = True) -> Exporter:
    """vLLM's counters as it declares them at start (all zero)."""
    e = Exporter(URL)
    for name in ("vllm:prompt_tokens", "vllm:prefix_cache_hits", "vllm:external_prefix_cache_hits"):
        e.inc(name, **VLLM)
    if by_source:
        for source in ("local_compute", "local_cache_hit", "external_kv_transfer"):
            e.inc("vllm:prompt_tokens_by_source", source=source, **VLLM)
    return e


def serve(e: Exporter, computed: int, gpu: int = 0, external: int = 0, by_source: bool = True) -> None:
    """One request: ``computed`` tokens prefilled, ``gpu`` from the prefix cache, ``external`` loaded."""
    e.inc("vllm:prompt_tokens", computed + gpu + external, **VLLM)
    e.inc("vllm:prefix_cache_hits", gpu, **VLLM)
    e.inc("vllm:external_prefix_cache_hits", external, **VLLM)
    if by_source:
        e.inc("vllm:prompt_tokens_by_source", computed, source="local_compute", **VLLM)
        e.inc("vllm:prompt_tokens_by_source", gpu, source="local_cache_hit", **VLLM)
        e.inc("vllm:prompt_tokens_by_source", external, source="external_kv_transfer", **VLLM)
    e.observe("vllm:request_prefill_time_seconds", computed * 1e-4, **VLLM)


def test_computed_tokens_are_vllms_local_compute_source() -> None:
    e = vllm_engine()
    serve(e, computed=3000, gpu=2000, external=1000)
    serve(e, computed=500, gpu=4000)
    assert computed_tokens(e.snapshot()) == 3000 + 500


def test_without_the_source_counter_computed_is_prompt_tokens_less_both_kinds_of_hits() -> None:
    e = vllm_engine(by_source=False)
    serve(e, computed=3000, gpu=2000, external=1000, by_source=False)
    serve(e, computed=500, gpu=4000, by_source=False)
    snap = e.snapshot()
    assert not snap.has("vllm:prompt_tokens_by_source")
    assert computed_tokens(snap) == 3000 + 500


def test_sglang_computed_is_prompt_tokens_less_cached_tokens() -> None:
    e = Exporter(URL)
    e.inc("sglang:prompt_tokens", 9000, **SGLANG)
    e.inc("sglang:cached_tokens", 6500, **SGLANG)
    assert computed_tokens(e.snapshot()) == 9000 - 6500


def test_no_counters_is_unmeasured_not_zero() -> None:
    assert computed_tokens(MetricsSnapshot()) is None
    assert prefill_seconds(MetricsSnapshot()) is None
    budget = PrefillBudget(0.01, MetricsSnapshot(errors=["http://127.0.0.1:8000/metrics: HTTP 503"]))
    assert not budget.measured and budget.engine_seconds is None
    # Unmeasurable: the interval alone paces the canary.
    assert budget.allows(10**9) and budget.needed(10**9) == 0.0


def test_growth_is_counted_from_the_baseline_scrape() -> None:
    e = vllm_engine()
    serve(e, computed=40_000)  # what the engine computed before the canary started
    budget = PrefillBudget(0.01, e.snapshot())
    assert budget.measured and budget.engine == 0
    serve(e, computed=2500, gpu=10_000)
    serve(e, computed=1500)
    budget.update(e.snapshot())
    assert budget.engine == 2500 + 1500
    assert budget.engine_seconds is not None
    assert math.isclose(budget.engine_seconds, (2500 + 1500) * 1e-4)


def test_a_failed_scrape_changes_nothing() -> None:
    e = vllm_engine()
    budget = PrefillBudget(0.01, e.snapshot())
    serve(e, computed=5000)
    budget.update(e.snapshot())
    budget.update(MetricsSnapshot(errors=["http://127.0.0.1:8000/metrics: ConnectError"]))
    assert budget.engine == 5000
    serve(e, computed=1000)
    budget.update(e.snapshot())
    assert budget.engine == 6000


def test_an_engine_restart_resets_its_counters_and_the_total_carries() -> None:
    e = vllm_engine()
    serve(e, computed=1000)
    budget = PrefillBudget(0.01, e.snapshot())
    serve(e, computed=4000)
    budget.update(e.snapshot())
    assert budget.engine == 4000
    e.restart()  # the fallback restarted it: its counters count from 0 again
    e.inc("vllm:prompt_tokens_by_source", 300, source="local_compute", **VLLM)
    e.observe("vllm:request_prefill_time_seconds", 0.03, **VLLM)
    budget.update(e.snapshot())
    assert budget.engine == 4000 + 300
    e.inc("vllm:prompt_tokens_by_source", 500, source="local_compute", **VLLM)
    budget.update(e.snapshot())
    assert budget.engine == 4000 + 300 + 500
    e.restart()  # and once more
    e.inc("vllm:prompt_tokens_by_source", 100, source="local_compute", **VLLM)
    budget.update(e.snapshot())
    assert budget.engine == 4000 + 800 + 100
    assert budget.engine_seconds is not None
    assert math.isclose(budget.engine_seconds, 4000 * 1e-4 + 0.03)


def test_since_counts_growth_across_restarts() -> None:
    since = Since(10.0)
    for now, want in ((15.0, 5.0), (15.0, 5.0), (3.0, 8.0), (7.0, 12.0), (1.0, 13.0), (None, 13.0)):
        since.update(now)
        assert since.value == want, (now, since.value)
    unmeasured = Since(None)
    unmeasured.update(100.0)
    assert unmeasured.value == 0.0


def test_the_canarys_share_never_passes_the_budget() -> None:
    rng = random.Random(7)
    e = vllm_engine()
    budget = PrefillBudget(0.01, e.snapshot())
    cost = 2 * 1024 + 16  # a check's worst case: asked cold and recomputed
    checks = 0
    for _ in range(400):
        serve(e, computed=rng.randrange(0, 6000), gpu=rng.randrange(0, 6000))  # the users' traffic
        budget.update(e.snapshot())
        if budget.allows(cost):
            serve(e, computed=cost)  # the engine computes the canary's tokens too
            budget.spend(cost)
            budget.update(e.snapshot())
            checks += 1
        assert budget.spent <= 0.01 * budget.engine
    assert checks > 0 and budget.spent == checks * cost
    # Not starved either: the share came within one check of the budget.
    assert budget.spent + cost > 0.01 * budget.engine


def test_needed_is_the_user_traffic_that_makes_room() -> None:
    e = vllm_engine()
    budget = PrefillBudget(0.02, e.snapshot())
    serve(e, computed=10_000)
    budget.update(e.snapshot())
    budget.spend(150)
    cost = 1024
    need = budget.needed(cost)
    assert need > 1 and not budget.allows(cost)
    serve(e, computed=math.ceil(need) - 1)
    budget.update(e.snapshot())
    assert not budget.allows(cost) and 0 < budget.needed(cost) <= 1
    serve(e, computed=1)
    budget.update(e.snapshot())
    assert budget.allows(cost) and budget.needed(cost) == 0.0
