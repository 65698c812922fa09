"""Window arithmetic: counter deltas, histogram percentiles from bucket deltas, the views built from them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kvstack.clients import metrics as m
from kvstack.clients.metrics import MetricsSnapshot, parse_metrics
from kvstack.top.sources import RedisStats, Scrape
from kvstack.top.targets import Targets
from kvstack.top.window import (
    bucket_deltas,
    build,
    counter_delta,
    histogram_quantile,
    lmcache_view,
    remote_view,
    server_view,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"


def ttft_text(counts: dict[str, int], total_s: float) -> str:
    """A vLLM TTFT histogram in exposition text; ``counts`` are cumulative per ``le``."""
    lines = ["# TYPE vllm:time_to_first_token_seconds histogram"]
    for le, n in counts.items():
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{le}",model_name="m"}} {n}')
    lines.append(f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="m"}} {counts["+Inf"]}')
    lines.append(f'vllm:time_to_first_token_seconds_sum{{engine="0",model_name="m"}} {total_s}')
    return "\n".join(lines) + "\n"


def test_histogram_quantile_interpolates_within_the_bucket() -> None:
    # 10 observations: 4 in (0, 0.1], 4 in (0.1, 0.2], 2 in (0.2, 0.5].
    buckets = [(0.1, 4.0), (0.2, 8.0), (0.5, 10.0), (math.inf, 10.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.125)  # rank 5: 1/4 into (0.1, 0.2]
    assert histogram_quantile(0.9, buckets) == pytest.approx(0.35)  # rank 9: half way in (0.2, 0.5]
    assert histogram_quantile(0.2, buckets) == pytest.approx(0.05)  # rank 2 in the first bucket, from 0


def test_histogram_quantile_in_the_inf_bucket_answers_the_highest_bound() -> None:
    assert histogram_quantile(0.9, [(0.1, 1.0), (1.0, 2.0), (math.inf, 10.0)]) == 1.0


def test_histogram_quantile_without_observations_is_none() -> None:
    assert histogram_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None
    assert histogram_quantile(0.5, []) is None
    with pytest.raises(ValueError):
        histogram_quantile(50, [(math.inf, 1.0)])


def test_percentiles_come_from_the_window_not_since_start() -> None:
    # Since start: 100 fast requests (<= 10 ms). In the window: 10 slow ones (0.5-1 s).
    before = parse_metrics(ttft_text({"0.01": 100, "0.5": 100, "1.0": 100, "+Inf": 100}, 0.5))
    after = parse_metrics(ttft_text({"0.01": 100, "0.5": 100, "1.0": 110, "+Inf": 110}, 8.0))
    window = bucket_deltas(before, after, m.VLLM_TTFT)
    assert window == [(0.01, 0.0), (0.5, 0.0), (1.0, 10.0), (math.inf, 10.0)]
    assert histogram_quantile(0.5, window) == pytest.approx(0.75)
    # Over everything since start the median would be a fast request: the window must not be that.
    since_start = bucket_deltas(MetricsSnapshot(), after, m.VLLM_TTFT)
    assert histogram_quantile(0.5, since_start) is not None
    assert histogram_quantile(0.5, since_start) < 0.01  # type: ignore[operator]


def test_bucket_deltas_sum_label_sets_and_restart_counts_from_zero() -> None:
    text = ttft_text({"0.1": 2, "+Inf": 3}, 1.0) + ttft_text({"0.1": 1, "+Inf": 1}, 0.1).replace(
        'engine="0"', 'engine="1"'
    ).replace("# TYPE vllm:time_to_first_token_seconds histogram\n", "")
    two_engines = parse_metrics(text)
    assert bucket_deltas(MetricsSnapshot(), two_engines, m.VLLM_TTFT) == [(0.1, 3.0), (math.inf, 4.0)]
    restarted = parse_metrics(ttft_text({"0.1": 1, "+Inf": 1}, 0.05))
    assert bucket_deltas(two_engines, restarted, m.VLLM_TTFT) == [(0.1, 1.0), (math.inf, 1.0)]


def test_counter_delta_is_none_when_absent_and_counts_a_reset_from_zero() -> None:
    a = parse_metrics('# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{engine="0"} 500\n')
    b = parse_metrics('# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{engine="0"} 800\n')
    reset = parse_metrics('# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{engine="0"} 40\n')
    assert counter_delta(a, b, m.VLLM_PROMPT_TOKENS) == 300
    assert counter_delta(b, reset, m.VLLM_PROMPT_TOKENS) == 40
    assert counter_delta(a, b, m.VLLM_TTFT) is None


def test_server_view_from_real_vllm_exposition() -> None:
    before = parse_metrics((FIXTURES / "vllm_after_cold.prom").read_text())
    after = parse_metrics((FIXTURES / "vllm_after_warm.prom").read_text())
    view = server_view("http://s", before, after, None, window_s=2.0)
    assert view.up and view.engine == "vllm"
    prompt = after.value(m.VLLM_PROMPT_TOKENS) - before.value(m.VLLM_PROMPT_TOKENS)
    assert prompt > 0
    assert view.prompt_tokens == prompt
    assert view.prompt_tokens_per_s == pytest.approx(prompt / 2.0)
    assert view.kv_usage == after.get(m.VLLM_KV_USAGE)
    # The warm request came from the engine's prefix cache (1920 tokens) and the rest was recomputed.
    assert view.sources["engine_cache"].tokens == 1920.0
    assert sum(s.tokens for s in view.sources.values()) == prompt
    assert sum(s.share or 0 for s in view.sources.values()) == pytest.approx(1.0)


def test_down_server_view_keeps_the_reason() -> None:
    down = MetricsSnapshot([], ["http://s/metrics"], ["http://s/metrics: ConnectError: refused"])
    view = server_view("http://s", MetricsSnapshot(), down, None, 2.0)
    assert not view.up
    assert view.error is not None and "refused" in view.error


def lm_text(requested: int, l1: int, l2: int, fs_loads: int, resp_loads: int) -> str:
    """An LMCache cache server's /metrics in lmcache 0.5.6's names and labels."""
    return f"""# TYPE lmcache_mp_lookup_requested_tokens counter
lmcache_mp_lookup_requested_tokens_total{{model_name="m"}} {requested}
# TYPE lmcache_mp_lookup_hit_l1_tokens counter
lmcache_mp_lookup_hit_l1_tokens_total{{model_name="m"}} {l1}
# TYPE lmcache_mp_lookup_hit_l2_tokens counter
lmcache_mp_lookup_hit_l2_tokens_total{{model_name="m"}} {l2}
# TYPE lmcache_mp_l2_load_completed_requests counter
lmcache_mp_l2_load_completed_requests_total{{l2_name="fs"}} {fs_loads}
lmcache_mp_l2_load_completed_requests_total{{l2_name="resp"}} {resp_loads}
# TYPE lmcache_mp_l1_memory_usage_bytes gauge
lmcache_mp_l1_memory_usage_bytes{{backend="dram",l1_tag="_default"}} 1048576
# TYPE lmcache_mp_l1_usage_ratio gauge
lmcache_mp_l1_usage_ratio{{backend="dram",l1_tag="_default"}} 0.25
# TYPE lmcache_mp_l2_usage_bytes gauge
lmcache_mp_l2_usage_bytes{{l2_name="fs"}} 4096
lmcache_mp_l2_usage_bytes{{l2_name="resp"}} 2048
"""


def test_lmcache_view_window_rates_totals_and_l1_size() -> None:
    before = parse_metrics(lm_text(requested=1000, l1=300, l2=100, fs_loads=2, resp_loads=1))
    after = parse_metrics(lm_text(requested=2000, l1=700, l2=400, fs_loads=5, resp_loads=4))
    view = lmcache_view("http://lm", before, after, window_s=4.0)
    assert (view.l1_hit_tokens, view.l2_hit_tokens, view.lookup_tokens) == (400, 300, 1000)
    assert view.l1_hit_tokens_per_s == 100.0 and view.l2_hit_tokens_per_s == 75.0
    assert (view.l1_hit_tokens_total, view.l2_hit_tokens_total) == (700, 400)
    assert view.hit_ratio == pytest.approx(0.7)
    assert view.l1_size_bytes == 4 * 1048576
    adapters = {a.name: a for a in view.adapters}
    assert adapters["fs"].tier == "disk" and adapters["fs"].loads == 3 and adapters["fs"].usage_bytes == 4096
    assert adapters["resp"].tier == "remote" and adapters["resp"].loads == 3


def test_lmcache_view_of_a_fresh_server_reads_zero_not_missing() -> None:
    # lmcache's OTel counters appear with their first event: a fresh server exports only gauges.
    fresh = parse_metrics((FIXTURES / "lmcache_mp_fresh.prom").read_text())
    view = lmcache_view("http://lm", fresh, fresh, 2.0)
    assert view.up
    assert (view.l1_hit_tokens, view.l2_hit_tokens, view.l1_hit_tokens_total) == (0, 0, 0)
    assert [a.name for a in view.adapters] == ["fs"]


def test_remote_view_window_hit_ratio_and_evictions() -> None:
    before = RedisStats(True, used_memory=100, keys=5, evicted_keys=1, keyspace_hits=10, keyspace_misses=10)
    after = RedisStats(True, used_memory=200, keys=7, evicted_keys=4, keyspace_hits=40, keyspace_misses=20)
    view = remote_view("redis://127.0.0.1:1/0", before, after)
    assert view.hit_ratio == pytest.approx(30 / 40)
    assert view.hit_ratio_total == pytest.approx(40 / 60)
    assert (view.evicted_keys, view.evicted_keys_total, view.keys) == (3, 4, 7)
    assert remote_view("r", None, RedisStats(False, "cannot connect")).error == "cannot connect"


def test_build_uses_the_time_between_scrapes_as_the_window() -> None:
    t = Targets(servers=("http://s",))
    a = parse_metrics('# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{engine="0"} 500\n')
    b = parse_metrics('# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{engine="0"} 900\n')
    snap = build(t, Scrape(10.0, 1.0, {"http://s": a}), Scrape(14.0, 5.0, {"http://s": b}))
    assert snap.window_s == 4.0
    assert snap.servers[0].prompt_tokens_per_s == 100.0


def test_a_reset_of_one_series_is_not_hidden_by_anothers_growth() -> None:
    # Two engines (data parallel): engine 1 restarted (1000 -> 150) while engine 0 grew by 500.
    def prompt(e0: int, e1: int) -> MetricsSnapshot:
        return parse_metrics(
            "# TYPE vllm:prompt_tokens counter\n"
            f'vllm:prompt_tokens_total{{engine="0"}} {e0}\nvllm:prompt_tokens_total{{engine="1"}} {e1}\n'
        )

    assert counter_delta(prompt(1000, 1000), prompt(1500, 150), m.VLLM_PROMPT_TOKENS) == 650
    # Engine 0 restarted (2000 -> 100) while engine 1 grew by 2500: the sum grew by only 600.
    assert counter_delta(prompt(2000, 0), prompt(100, 2500), m.VLLM_PROMPT_TOKENS) == 2600


def test_histogram_reset_of_one_engine_is_counted_per_engine() -> None:
    def two(e0: dict[str, int], e1: dict[str, int]) -> MetricsSnapshot:
        second = ttft_text(e1, 0.1).replace('engine="0"', 'engine="1"')
        return parse_metrics(ttft_text(e0, 1.0) + second.split("\n", 1)[1])

    before = two({"0.1": 100, "+Inf": 100}, {"0.1": 10, "+Inf": 10})
    after = two({"0.1": 101, "+Inf": 102}, {"0.1": 3, "+Inf": 3})  # engine 1 restarted
    assert bucket_deltas(before, after, m.VLLM_TTFT) == [(0.1, 4.0), (math.inf, 5.0)]


def test_a_window_after_a_failed_scrape_shows_no_totals_since_start() -> None:
    # The first scrape timed out: counting from zero would show lifetime totals as this window's.
    failed = MetricsSnapshot([], ["http://s/metrics"], ["http://s/metrics: ReadTimeout"])
    after = parse_metrics((FIXTURES / "vllm_after_warm.prom").read_text())
    view = server_view("http://s", failed, after, None, window_s=2.0)
    assert view.up and view.engine == "vllm" and view.kv_usage == after.get(m.VLLM_KV_USAGE)
    assert (view.prompt_tokens, view.requests, view.ttft_p50_s, view.sources) == (None, None, None, {})
    lm_after = parse_metrics(lm_text(requested=2000, l1=700, l2=400, fs_loads=5, resp_loads=4))
    lm_view = lmcache_view("http://lm", failed, lm_after, 2.0)
    assert lm_view.up and lm_view.l1_hit_tokens is None and lm_view.l1_hit_tokens_total == 700


def test_two_cache_servers_behind_one_engine_reset_separately() -> None:
    # Two replicas' cache servers feed one engine's split: a restarted (L1 900 -> 100) while b's
    # L1 served 900 and its disk 1000. Summed, L1 would read +100; per server it is 1000.
    def engine(external: int) -> MetricsSnapshot:
        return parse_metrics(
            "# TYPE vllm:prompt_tokens_by_source counter\n"
            f'vllm:prompt_tokens_by_source_total{{engine="0",source="local_compute"}} 100\n'
            f'vllm:prompt_tokens_by_source_total{{engine="0",source="external_kv_transfer"}} {external}\n'
        )

    def lm(l1: int, l2: int, fs_loads: int) -> MetricsSnapshot:
        return parse_metrics(lm_text(l1 + l2, l1, l2, fs_loads, 0))

    t = Targets(servers=("http://s",), lmcache=("http://a", "http://b"))
    before = Scrape(0.0, 0.0, {"http://s": engine(0)}, {"http://a": lm(900, 0, 0), "http://b": lm(0, 0, 0)})
    after = Scrape(
        2.0, 2.0, {"http://s": engine(2000)}, {"http://a": lm(100, 0, 0), "http://b": lm(900, 1000, 4)}
    )
    (view,) = build(t, before, after).servers
    assert view.sources["dram"].tokens == 1000 and view.sources["disk"].tokens == 1000
