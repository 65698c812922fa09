from __future__ import annotations

import pytest

from kvstack.bench.schema import RequestRow
from kvstack.bench.stats import (
    cache_stats,
    distribution,
    last_token_s,
    measured,
    percentile,
    summarize,
    tpot,
    wall_time,
)
from kvstack.clients.metrics import MetricsSnapshot, parse_metrics
from kvstack.clients.streaming import RequestResult
from tests.support.deps import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "metrics"


def _snap(name: str) -> MetricsSnapshot:
    return parse_metrics((FIXTURES / f"{name}.prom").read_text(), name)


def _row(
    i: int, ok: bool = True, ttft: float = 0.1, e2e: float = 0.5, start: float = 0.0, **kw: object
) -> RequestRow:
    base: dict[str, object] = dict(
        layout="a",
        id=f"r{i}",
        index=i,
        round=0,
        group="g",
        prompt_tokens=100,
        expected_prefix_tokens=0,
        ok=ok,
        start_s=start,
        ttft_s=ttft if ok else None,
        e2e_s=e2e,
        output_tokens=5 if ok else 0,
        error=None if ok else "HTTP 500: injected",
    )
    base.update(kw)
    return RequestRow.model_validate(base)


def test_percentile_interpolates_linearly_like_numpy() -> None:
    # rank = (n - 1) * q / 100; hand-computed: n=4, q=90 -> rank 2.7 -> 3 + 0.7 * (4 - 3)
    assert percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert percentile([1, 2, 3, 4], 90) == pytest.approx(3.7)
    assert percentile([1, 2, 3, 4], 99) == pytest.approx(3.97)
    assert percentile([10, 20, 30, 40, 50], 90) == pytest.approx(46.0)
    assert percentile([7.0], 99) == 7.0
    assert percentile([1, 2], 0) == 1 and percentile([1, 2], 100) == 2
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_distribution_skips_missing_values() -> None:
    d = distribution([0.3, None, 0.1, 0.2])
    assert d is not None
    assert (d.n, d.min, d.max) == (3, 0.1, 0.3)
    assert d.mean == pytest.approx(0.2) and d.p50 == pytest.approx(0.2)
    assert distribution([None]) is None


def test_tpot_is_decode_time_per_token_after_the_first() -> None:
    assert tpot(last_token_s=1.0, ttft_s=0.2, output_tokens=5) == pytest.approx(0.2)  # 0.8 s / 4 tokens
    assert tpot(1.0, 0.2, 1) is None
    assert tpot(None, 0.2, 5) is None


def test_tpot_ends_at_the_last_token_not_the_end_of_the_stream() -> None:
    # Sent at 0; first token at 0.10 s, then gaps of 0.02, 0.03 and 0.05 s (last token at 0.20 s);
    # the usage event and [DONE] end the stream at 0.25 s. vLLM's bench: (latency - ttft) / (n - 1)
    # with its latency at the last token = (0.20 - 0.10) / 3; the stream's end is not decode time.
    res = RequestResult(ok=True, start_time=1000.0, ttft_s=0.10, itl_s=[0.02, 0.03, 0.05], e2e_s=0.25,
                        output_tokens=4)  # fmt: skip
    assert last_token_s(res) == pytest.approx(0.20)
    row = measured(res, started_at=999.5)
    assert row["tpot_s"] == pytest.approx(0.10 / 3)
    assert row["e2e_s"] == pytest.approx(0.25) and row["start_s"] == pytest.approx(0.5)
    # Tokens bundled in one event (no gaps): no decode time seen, as vLLM's bench counts it.
    bundled = RequestResult(ok=True, ttft_s=0.1, e2e_s=0.3, output_tokens=8)
    assert measured(bundled, 0.0)["tpot_s"] == pytest.approx(0.0)
    assert last_token_s(RequestResult(error="HTTP 500")) is None
    assert measured(RequestResult(error="HTTP 500", e2e_s=0.01), 0.0)["tpot_s"] is None


def test_throughput_and_ttft_p90_as_vllm_bench_serve_computes_them() -> None:
    # Hand-computed as vllm/benchmarks/serve.py does: output token throughput = the successful
    # requests' output tokens / the duration from the first send to the last stream's end; TTFT p90
    # = numpy's linear percentile over the successful requests. 10 requests of 32 tokens, 2 at a
    # time: request i starts at 0.2 * (i // 2), takes 0.2 s; TTFT i * 0.01 + 0.02; request 9 failed.
    rows = [
        _row(i, start=0.2 * (i // 2), e2e=0.2, ttft=0.02 + 0.01 * i, output_tokens=32) for i in range(9)
    ] + [_row(9, ok=False, start=0.8, e2e=0.05)]
    s = summarize(rows)
    assert s.wall_s == pytest.approx(1.0)  # first send 0.0, last end 0.8 + 0.2
    assert s.output_tokens_per_s == pytest.approx(9 * 32 / 1.0)
    # 9 TTFTs 0.02 .. 0.10: rank (9 - 1) * 0.9 = 7.2 -> 0.09 + 0.2 * (0.10 - 0.09)
    assert s.ttft_s is not None and s.ttft_s.p90 == pytest.approx(0.092)


def test_summary_throughput_and_errors() -> None:
    rows = [
        _row(0, start=0.0, e2e=1.0, ttft=0.1),
        _row(1, start=0.5, e2e=1.5, ttft=0.3),  # ends at 2.0: the wall time is 2 s
        _row(2, ok=False, start=1.0, e2e=0.01),
        _row(3, start=1.0, e2e=0.5, ttft=0.2, expected_prefix_tokens=60),
    ]
    assert wall_time(rows) == pytest.approx(2.0)
    s = summarize(rows)
    assert (s.requests, s.ok, s.errors) == (4, 3, 1)
    assert s.requests_per_s == pytest.approx(3 / 2.0)
    assert s.output_tokens_per_s == pytest.approx(15 / 2.0)
    assert s.ttft_s is not None and s.ttft_s.p50 == pytest.approx(0.2) and s.ttft_s.mean == pytest.approx(0.2)
    assert s.error_kinds == {"HTTP 500": 1}
    assert s.prompt_tokens == 400 and s.ideal_hit_rate == pytest.approx(60 / 400)
    assert summarize(rows, wall_s=4.0).requests_per_s == pytest.approx(0.75)


def test_itl_distribution_pools_every_gap() -> None:
    rows = [_row(0, itl_s=[0.01, 0.03]), _row(1, itl_s=[0.02])]
    itl = summarize(rows).itl_s
    assert itl is not None and itl.n == 3 and itl.p50 == pytest.approx(0.02)


def test_vllm_prefix_cache_hit_rate_from_real_counters() -> None:
    # vllm_start -> vllm_after_warm: 4096 tokens queried, 1920 hit (a 2048-token prompt sent
    # twice; the second reuses 15 blocks of 128).
    s = cache_stats(_snap("vllm_start"), _snap("vllm_after_warm"))
    assert s.engine == "vllm"
    assert (s.prefix_queries, s.prefix_hits) == (4096, 1920)
    assert s.prefix_hit_rate == pytest.approx(1920 / 4096)
    assert s.prompt_tokens_by_source == {
        "local_compute": 2176,
        "local_cache_hit": 1920,
        "external_kv_transfer": 0,
    }
    assert s.cached_tokens_by_source["device"] == 1920 and s.cached_tokens_by_source["host"] == 0
    assert s.token_hit_rate == pytest.approx(1920 / 4096)
    assert s.lmcache_hit_tokens is None and s.sglang_tokens_by_mode == {}


def test_vllm_offload_hits_count_as_external_and_host() -> None:
    s = cache_stats(_snap("vllm_offload_before_tier"), _snap("vllm_offload_after_tier"))
    assert s.prefix_hits == 0
    assert (s.external_queries, s.external_hits) == (2048, 1920)
    assert s.external_hit_rate == pytest.approx(1920 / 2048)
    assert s.cached_tokens_by_source["host"] == 1920
    # By source: 128 computed + 1920 transferred of the 2048 prompt tokens of this interval.
    assert s.token_hit_rate == pytest.approx(1920 / 2048)


def test_real_vllm_server_scrape() -> None:
    s = cache_stats(_snap("vllm_start"), _snap("vllm_server_demo"))
    assert s.prefix_hit_rate == pytest.approx(13312 / 27066)
    assert s.token_hit_rate == pytest.approx(13312 / (13754 + 13312))


def test_lmcache_counters() -> None:
    s = cache_stats(_snap("lmcache_before_tier"), _snap("lmcache_after_tier"))
    assert (s.lmcache_requested_tokens, s.lmcache_hit_tokens) == (2048, 2048)
    assert s.lmcache_hit_rate == pytest.approx(1.0)
    assert s.lmcache_stored_tokens == 0  # stored before the interval, not during it
    assert s.token_hit_rate is None  # no engine counters in an LMCache-only scrape


def test_lmcache_mp_counters() -> None:
    text = (
        'lmcache_mp_lookup_requested_tokens_total{{model_name="m"}} {r}\n'
        'lmcache_mp_lookup_hit_tokens_total{{model_name="m"}} {h}\n'
        'lmcache_mp_lookup_hit_l1_tokens_total{{model_name="m"}} {l1}\n'
        'lmcache_mp_lookup_hit_l2_tokens_total{{model_name="m"}} {l2}\n'
    )
    before = parse_metrics(text.format(r=100, h=50, l1=50, l2=0))
    after = parse_metrics(text.format(r=1100, h=850, l1=250, l2=550))
    s = cache_stats(before, after)
    assert (s.lmcache_mp_requested_tokens, s.lmcache_mp_hit_tokens) == (1000, 800)
    assert (s.lmcache_mp_l1_hit_tokens, s.lmcache_mp_l2_hit_tokens) == (200, 550)


def test_sglang_hit_rate_by_mode() -> None:
    # input +1 (computed), host_hit +2047: a 2048-token prompt served from the host tier.
    s = cache_stats(_snap("sglang_before_tier"), _snap("sglang_after_tier"))
    assert s.engine == "sglang"
    assert s.sglang_tokens_by_mode == {"input": 1, "device_hit": 0, "host_hit": 2047, "storage_hit": 0}
    assert s.token_hit_rate == pytest.approx(2047 / 2048)


def test_missing_counters_and_scrape_errors() -> None:
    before = MetricsSnapshot(errors=["http://x/metrics: HTTP 404"])
    s = cache_stats(before, MetricsSnapshot())
    assert s.token_hit_rate is None and s.prefix_hit_rate is None and s.engine is None
    assert s.scrape_errors == ["http://x/metrics: HTTP 404"]
    # No queries in the interval: a rate is undefined, not 0.
    same = _snap("vllm_start")
    assert cache_stats(same, same).prefix_hit_rate is None
