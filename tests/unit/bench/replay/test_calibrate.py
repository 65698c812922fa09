"""The calibration against a served layout, and predicted TTFT per request sent from its costs."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from kvstack.bench.replay.calibrate import (
    DECODE_TOKENS,
    calibrate,
    decode_batches,
    dram_fetch_problem,
    fit_decode,
    predicted_ttft,
    summary,
    tpot_s,
)
from kvstack.bench.replay.prompts import BlockTokens
from kvstack.clients.streaming import RequestResult
from kvstack.planning.predict.served_ttft import ServedCosts
from tests.support.stream_server import ServerKnobs, StreamServer


def test_each_request_is_predicted_from_its_own_sources() -> None:
    costs = ServedCosts(hit_s=0.01, miss_s=0.0, linear_s=1e-5, quadratic_s=0.0, fetch_s={"dram": 2e-6})
    per_request = {"engine_cache": [0, 512, 0], "dram": [0, 0, 512], "disk": [0, 0, 256]}
    got = predicted_ttft(costs, [1024, 1024, 1024], per_request)
    assert got[0] == pytest.approx(0.01 + 1024e-5)
    assert got[1] == pytest.approx(0.01 + 512e-5)
    # The disk tier, without a figure of its own, is fetched at DRAM's cost.
    assert got[2] == pytest.approx(0.01 + 256e-5 + 768 * 2e-6)


def test_the_summary_sets_measured_against_predicted() -> None:
    costs = ServedCosts(hit_s=0.01, miss_s=0.0, linear_s=0.0, quadratic_s=0.0)
    out = summary(costs, [0.1] * 10, [0.2] * 10)
    ratio = out.measured_over_predicted
    assert (ratio.p50_s, ratio.p90_s) == (pytest.approx(2.0), pytest.approx(2.0))
    assert out.calibration is not None and out.calibration.hit_s == 0.01


def test_calibration_covers_the_context_up_to_8192_tokens() -> None:
    from kvstack.bench.replay.calibrate import calibration_lengths

    assert calibration_lengths(16382) == [512, 1024, 2048, 4096, 8192]  # the demo's 16K context
    assert calibration_lengths(8190) == [512, 1024, 2048, 4096]
    assert calibration_lengths(300) == [300]


# The stand-in engine (a real HTTP server) with LMCache's cache server behind it: its engine pool
# holds 1,024 tokens, a miss costs 4e-5 s per token, a token from LMCache's DRAM 1e-4 s and one from
# its disk (L2) 4e-4 s: the calibration's fetch figure has a known right answer.
DRAM_S, DISK_S = 1e-4, 4e-4
FETCHING = ServerKnobs(
    connector="lmcache",
    lmcache_mp=True,
    block_size=16,
    num_gpu_blocks=64,
    chunk_tokens=64,
    tier_s_per_token=DRAM_S,
    l2_s_per_token=DISK_S,
)


def _calibrate(
    knobs: ServerKnobs, reset_path: str | None = None, sent: list[int] | None = None
) -> ServedCosts:
    """The calibration against the stand-in; ``sent`` gets the prompt length of each request sent."""
    with StreamServer(knobs) as srv:
        costs = asyncio.run(
            calibrate(
                srv.url,
                "demo-model",
                BlockTokens(list(range(100, 400)), 64, seed=0),
                api_key=None,
                max_prompt=2048,
                engine_pool_tokens=knobs.num_gpu_blocks * knobs.block_size,
                metrics_urls=[srv.url + "/metrics"],
                align=64,
                reset_path=reset_path,
            )
        )
        if sent is not None:
            sent += [r["tokens"] for r in srv.requests]
        return costs


def test_the_dram_fetch_figure_is_the_dram_tiers_cost() -> None:
    costs = _calibrate(FETCHING)  # L1 unbounded: the prompt pushed out of the engine is in DRAM
    assert costs.fetch_s["dram"] == pytest.approx(DRAM_S, rel=0.25)
    assert "fetched back from the offload tier's DRAM" in costs.source


def test_a_fetch_the_dram_tier_did_not_serve_is_discarded() -> None:
    # L1 holds 2,048 tokens: the prompt that pushes the sample out of the engine's pool pushes it out
    # of DRAM too, so the disk serves it. Recorded as a DRAM fetch it would say ~4x DRAM's cost.
    costs = _calibrate(replace(FETCHING, l1_tokens=2048))
    assert "dram" not in costs.fetch_s
    assert "DRAM fetch sample was discarded: the counters say DRAM did not serve it" in costs.source
    assert "disk tier 2,048 of 2,048 tokens" in costs.source


def test_the_engines_reset_drops_the_sample_from_its_pool_without_pushing_dram() -> None:
    # The same 2,048-token L1: the engine's reset drops the prompt from its pool alone, so DRAM
    # still holds it and serves it; not one prompt is sent to push it out.
    flushed: list[int] = []
    _calibrate(replace(FETCHING, l1_tokens=2048), sent=flushed)
    sent: list[int] = []
    costs = _calibrate(replace(FETCHING, l1_tokens=2048), reset_path="/reset_prefix_cache", sent=sent)
    assert costs.fetch_s["dram"] == pytest.approx(DRAM_S, rel=0.25)
    assert "fetched back from the offload tier's DRAM" in costs.source
    assert len(flushed) - len(sent) == 1  # the one 2,048-token prompt that pushed the 1,024-token pool
    # An engine that does not serve the reset (vLLM off loopback: no dev mode) is pushed as before.
    fallback: list[int] = []
    _calibrate(replace(FETCHING, reset=False), reset_path="/reset_prefix_cache", sent=fallback)
    assert len(fallback) == len(flushed)


def test_a_request_is_a_dram_fetch_sample_only_when_dram_served_it_whole() -> None:
    assert dram_fetch_problem({"recomputed": 1, "engine_cache": 0, "dram": 2047}, 2048, 64) == ""
    assert "DRAM did not serve it" in dram_fetch_problem(
        {"recomputed": 0, "dram": 1024, "disk": 1024}, 2048, 64
    )
    assert "part of it was recomputed" in dram_fetch_problem({"recomputed": 1024, "dram": 1024}, 2048, 64)
    assert "do not say" in dram_fetch_problem({}, 2048, 64)


def test_the_stand_ins_decode_is_measured_at_each_batch_size() -> None:
    # The stand-in streams a token every itl_s (1 ms) whatever else it serves: a fixed part of about
    # 1 ms a step (the client's and the loop's time on top), nothing per sequence to speak of.
    costs = _calibrate(FETCHING)
    assert costs.decode_fixed_s is not None and costs.decode_per_seq_s is not None
    assert 0.001 <= costs.decode_fixed_s < 0.01 and costs.decode_per_seq_s < 0.001
    assert "decode: 1, 2, 4, 8 requests at once, 32 tokens each" in costs.source


def _decoded(batch: int, step_s: float, tokens: int = DECODE_TOKENS) -> RequestResult:
    """A request of ``tokens`` tokens whose stream gave a token every ``step_s`` after its first."""
    return RequestResult(ok=True, ttft_s=0.05, itl_s=[step_s] * (tokens - 1), output_tokens=tokens)


def test_the_decode_fit_recovers_the_fixed_and_per_sequence_parts() -> None:
    fixed, per_seq = 0.0018, 6e-5
    samples = []
    for b in (1, 2, 4, 8):
        step = fixed + per_seq * b
        # Each of the b requests' token times: the step, one of them noisy (the median ignores it).
        results = [_decoded(b, step) for _ in range(b)] + ([_decoded(b, step * 3)] if b > 2 else [])
        samples += [(b, t) for r in results if (t := tpot_s(r)) is not None]
    got = fit_decode(samples)
    assert got is not None
    assert got[0] == pytest.approx(fixed, rel=1e-6) and got[1] == pytest.approx(per_seq, rel=1e-6)
    # Least squares over the batch sizes' medians, not an interpolation of two of them.
    noisy = [(1, 0.0020), (2, 0.0019), (4, 0.0022), (8, 0.0023)]
    b = [1.0, 2.0, 4.0, 8.0]
    y = [0.0020, 0.0019, 0.0022, 0.0023]
    mb, my = sum(b) / 4, sum(y) / 4
    slope = sum((x - mb) * (v - my) for x, v in zip(b, y, strict=True)) / sum((x - mb) ** 2 for x in b)
    got = fit_decode(noisy)
    assert got is not None and got[1] == pytest.approx(slope) and got[0] == pytest.approx(my - slope * mb)


def test_decode_is_not_fitted_from_one_batch_size_nor_a_negative_part() -> None:
    assert fit_decode([(1, 0.002), (1, 0.0021)]) is None
    assert fit_decode([]) is None
    fixed, per_seq = fit_decode([(1, 0.003), (8, 0.002)]) or (None, None)  # slower alone: noise
    assert per_seq == 0.0 and fixed == pytest.approx(0.0025)


def test_a_requests_time_per_output_token_is_read_from_its_stream() -> None:
    # First token at 50 ms, then 3 more 2, 3 and 4 ms apart: 9 ms over 3 tokens.
    r = RequestResult(ok=True, ttft_s=0.05, itl_s=[0.002, 0.003, 0.004], output_tokens=4)
    assert tpot_s(r) == pytest.approx(0.003)
    # Two tokens in one event (a busy stream): the time still spreads over the tokens between.
    assert tpot_s(RequestResult(ok=True, ttft_s=0.05, itl_s=[0.006], output_tokens=4)) == pytest.approx(0.002)
    assert tpot_s(RequestResult(ok=True, ttft_s=0.05, output_tokens=1)) is None
    assert tpot_s(RequestResult(ok=False, itl_s=[0.002], output_tokens=2)) is None


def test_decode_batch_sizes_stay_within_the_engines_limits() -> None:
    assert decode_batches(None, None) == [1, 2, 4, 8]
    assert decode_batches(4, None) == [1, 2, 4]
    per_request = 64 + DECODE_TOKENS
    assert decode_batches(256, 3 * per_request) == [1, 2]  # the pool holds three requests at once
    assert decode_batches(256, 16384) == [1, 2, 4, 8]
