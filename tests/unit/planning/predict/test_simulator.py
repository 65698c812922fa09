"""planning/predict/simulator/engine.py: vLLM v1's schedule step by step (token budget, chunked
prefill, max_num_seqs, the pool's prefix hits, the tiers' loads and stores, preemption), each
figure worked out by hand from the inputs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvstack.planning.predict.simulator import (
    Layout,
    SchedulerLimits,
    SimRequest,
    StepCosts,
    TierSpec,
    simulate,
    synthetic,
)

FIXED, LIN, DECODE = 0.01, 0.001, 0.002  # a step, a prefill token, a decoding sequence (seconds)
COSTS = StepCosts(fixed_s=FIXED, prefill_s_per_token=LIN, decode_s_per_seq=DECODE, source="test")
BT = 16


def limits(budget: int = 64, seqs: int = 8, pool: int = 10_000, **kw: bool) -> SchedulerLimits:
    return SchedulerLimits(
        max_num_batched_tokens=budget, max_num_seqs=seqs, block_tokens=BT, pool_blocks=pool, **kw
    )


def layout(
    costs: StepCosts = COSTS,
    tiers: tuple[TierSpec, ...] = (),
    *,
    lim: SchedulerLimits | None = None,
    request_s: float = 0.0,
) -> Layout:
    return Layout(name="test", costs=costs, limits=lim or limits(), tiers=tiers, request_s=request_s)


def req(arrival: float, prompt: int, output: int, first_id: int = 0) -> SimRequest:
    """A prompt of its own ids (one per block), from ``first_id`` on."""
    n = -(-prompt // BT)
    return SimRequest(arrival, prompt, output, tuple(range(first_id, first_id + n)), BT)


def test_a_prompt_takes_ceil_of_prompt_over_budget_steps() -> None:
    # 200 tokens under a 64-token budget: chunks of 64, 64, 64 and 8, each step with its fixed cost.
    res = simulate([req(0.0, 200, 1)], layout())
    (r,) = res.requests
    assert res.steps == 4
    assert r.ttft_s == pytest.approx(4 * FIXED + 200 * LIN)
    assert r.recomputed_tokens == 200 and r.pool_hit_tokens == 0


def test_the_attention_term_integrates_over_the_chunks() -> None:
    # attn x ((p + c)^2 - p^2) summed over chunks at p = 0, 64, 128, 192 telescopes to attn x 200^2.
    attn = 1e-6
    costs = COSTS.model_copy(update={"prefill_attn_s_per_token2": attn})
    (r,) = simulate([req(0.0, 200, 1)], layout(costs)).requests
    assert r.ttft_s == pytest.approx(4 * FIXED + 200 * LIN + attn * 200**2)


def test_decoding_takes_a_step_a_token_and_tpot_is_its_cost() -> None:
    (r,) = simulate([req(0.0, 64, 5)], layout()).requests
    step = FIXED + DECODE  # one sequence decoding
    assert r.ttft_s == pytest.approx(FIXED + 64 * LIN)
    assert r.tpot_s == pytest.approx(step)
    assert r.finish_s == pytest.approx(FIXED + 64 * LIN + 4 * step)


def test_the_budget_left_after_the_running_ones_is_the_next_prompts_chunk() -> None:
    # A (100 tokens) and B (92) at once, 64 a step: A 64; A 36 + B 28; A decodes + B 63; A + B's
    # last token: A's decode token comes out of the budget first.
    res = simulate([req(0.0, 100, 10, 0), req(0.0, 92, 10, 100)], layout())
    a, b = res.requests
    step1 = FIXED + 64 * LIN
    step2 = FIXED + (36 + 28) * LIN
    step3 = FIXED + DECODE + 63 * LIN
    step4 = FIXED + DECODE + 1 * LIN
    assert a.ttft_s == pytest.approx(step1 + step2)
    assert b.ttft_s == pytest.approx(step1 + step2 + step3 + step4)


def test_unchunked_a_prompt_waits_for_a_step_with_room_for_all_of_it() -> None:
    # 50 + 50 tokens, 64 a step, prefill not chunked: B waits a step (chunked, it would take 14).
    lim = limits(chunked_prefill=False)
    a, b = simulate([req(0.0, 50, 10, 0), req(0.0, 50, 10, 100)], layout(lim=lim)).requests
    assert a.ttft_s == pytest.approx(FIXED + 50 * LIN)
    assert b.ttft_s == pytest.approx(FIXED + 50 * LIN + FIXED + DECODE + 50 * LIN)
    a2, _ = simulate([req(0.0, 50, 10, 0), req(0.0, 50, 10, 100)], layout()).requests
    assert a2.ttft_s == pytest.approx(FIXED + 64 * LIN)  # chunked: B's 14 tokens share A's step


def test_max_num_seqs_queues_the_request_beyond_it() -> None:
    two = [req(0.0, 32, 2, 0), req(0.0, 32, 2, 100)]
    a, b = simulate(two, layout(lim=limits(seqs=1))).requests
    a_done = FIXED + 32 * LIN + FIXED + DECODE
    assert a.finish_s == pytest.approx(a_done)
    assert b.ttft_s == pytest.approx(a_done + FIXED + 32 * LIN)  # admitted once A is done
    _, b2 = simulate(two, layout(lim=limits(seqs=2))).requests
    assert b2.ttft_s == pytest.approx(FIXED + 64 * LIN)  # both in the first step


def test_a_repeated_prompt_hits_the_pool_and_computes_only_its_last_token() -> None:
    # 161 tokens: 10 whole blocks cached (160 tokens), the last token computed for its logits.
    a, b = simulate([req(0.0, 161, 1), req(1.0, 161, 1)], layout()).requests
    assert a.recomputed_tokens == 161
    assert (b.pool_hit_tokens, b.recomputed_tokens) == (160, 1)
    assert b.ttft_s == pytest.approx(FIXED + 1 * LIN)  # one step


def test_a_whole_block_prompt_recomputes_its_last_block() -> None:
    # 160 tokens: the hit stops at (160 - 1) // 16 = 9 blocks; the 10th is computed again (vLLM).
    _, b = simulate([req(0.0, 160, 1), req(1.0, 160, 1)], layout()).requests
    assert (b.pool_hit_tokens, b.recomputed_tokens) == (144, 16)


def test_without_prefix_caching_a_repeated_prompt_is_computed_again() -> None:
    lim = limits(prefix_caching=False)
    _, b = simulate([req(0.0, 161, 1), req(1.0, 161, 1)], layout(lim=lim)).requests
    assert (b.pool_hit_tokens, b.recomputed_tokens) == (0, 161)


BPT, LOAD_BW, STORE_BW, LATENCY = 1000.0, 1e6, 1e9, 0.005


def cpu_tier(**kw: object) -> TierSpec:
    spec: dict[str, object] = dict(
        kind="cpu", capacity_chunks=100, chunk_tokens=256, bytes_per_token=BPT,
        load_bw_bytes_per_s=LOAD_BW, load_latency_s=LATENCY, store_bw_bytes_per_s=STORE_BW,
    )  # fmt: skip
    spec.update(kw)
    return TierSpec.model_validate(spec)


def evicted_from_pool(tier: TierSpec) -> list[float]:
    """A (512 tokens), then C (640 tokens of its own: the whole 40-block pool), then A again: A's
    blocks are gone from the pool, its two chunks are in the tier. B's TTFT, then A's."""
    lim = limits(budget=1024, pool=40)
    lay = layout(tiers=(tier,), lim=lim)
    a, _, b = simulate([req(0.0, 512, 1), req(1.0, 640, 1, 1000), req(2.0, 512, 1)], lay).requests
    assert (b.pool_hit_tokens, b.tier_hit_tokens, b.recomputed_tokens) == (0, (511,), 1)
    assert a.ttft_s is not None and b.ttft_s is not None
    return [b.ttft_s, a.ttft_s]


def test_a_prompt_gone_from_a_small_pool_is_loaded_from_the_tier_at_its_bandwidth() -> None:
    b, a = evicted_from_pool(cpu_tier())
    load = LATENCY + 511 * BPT / LOAD_BW  # 511 tokens (the last computed): latency + bytes / bw
    assert b == pytest.approx(FIXED + 1 * LIN + load)
    # A computed its two whole chunks and stored each (256 tokens x 1 kB at 1 GB/s) in its step.
    assert a == pytest.approx(FIXED + 512 * LIN + 2 * 256 * BPT / STORE_BW)


def test_an_overlapped_tier_costs_the_longer_of_compute_and_transfer() -> None:
    b, a = evicted_from_pool(cpu_tier(overlapped=True))
    assert b == pytest.approx(max(FIXED + 1 * LIN, LATENCY + 511 * BPT / LOAD_BW))
    assert a == pytest.approx(FIXED + 512 * LIN)  # its stores hidden under the compute


def test_a_request_waiting_for_its_own_load_computes_in_the_next_step() -> None:
    # vLLM's WAITING_FOR_REMOTE_KVS (lmcache-mp, native offload): the load runs in a step of its own,
    # no forward pass in it (nothing else runs), and the request computes its last token after it.
    b, a = evicted_from_pool(cpu_tier(overlapped=True, load_waits=True))
    assert b == pytest.approx(LATENCY + 511 * BPT / LOAD_BW + FIXED + 1 * LIN)
    assert a == pytest.approx(FIXED + 512 * LIN)


def test_a_waiting_load_runs_beside_the_other_requests_steps_and_the_lookup_before_it() -> None:
    tier = cpu_tier(overlapped=True, load_waits=True)
    lay = layout(tiers=(tier,), lim=limits(budget=1024, pool=40), request_s=0.002)
    # A (512 tokens, 32 blocks) stored; C (640 of its own: the whole pool) evicts A's blocks; B (16
    # tokens) decodes 100 tokens from 1.7 s; A again at 1.75 s: its 511 tokens load from the tier
    # (0.516 s) while B decodes, then A computes its last token in one of B's steps.
    rs = [req(0.0, 512, 1), req(1.0, 640, 1, 1000), req(1.7, 16, 100, 2000), req(1.75, 512, 1)]
    a, _, b, again = simulate(rs, lay).requests
    assert (again.pool_hit_tokens, again.tier_hit_tokens) == (0, (511,))
    assert a.ttft_s == pytest.approx(0.002 + FIXED + 512 * LIN)  # the lookup before the step
    load = LATENCY + 511 * BPT / LOAD_BW
    step = FIXED + DECODE  # one of B's decode steps
    assert again.ttft_s is not None and b.tpot_s is not None
    # The lookup, the load, then at most a step of B's waited out and its own step with B's decode.
    assert 0.002 + load + FIXED + LIN + DECODE <= again.ttft_s <= 0.002 + load + step + FIXED + LIN + DECODE
    # B's steps go on while A loads: only the lookup's step and A's own compute are added to them.
    assert b.tpot_s * 99 == pytest.approx(99 * step + 0.002 + LIN, abs=1e-9)


def test_stores_can_overlap_where_loads_do_not() -> None:
    b, a = evicted_from_pool(cpu_tier(store_overlapped=True))
    assert b == pytest.approx(FIXED + 1 * LIN + LATENCY + 511 * BPT / LOAD_BW)
    assert a == pytest.approx(FIXED + 512 * LIN)


def test_the_pool_serves_what_it_holds_and_the_tier_the_rest() -> None:
    # C of 528 tokens takes 33 of the 40 blocks: the 8 empty ones and 25 of A's 32 cached ones, tail
    # first (a request frees its last block first); A's first 7 blocks (112 tokens) stay. B takes
    # those from the pool, then the tier serves from the chunk the pool stopped in: [112, 511).
    lim = limits(budget=1024, pool=40)
    lay = layout(tiers=(cpu_tier(),), lim=lim)
    *_, b = simulate([req(0.0, 512, 1), req(1.0, 528, 1, 1000), req(2.0, 512, 1)], lay).requests
    assert (b.pool_hit_tokens, b.tier_hit_tokens, b.recomputed_tokens) == (112, (399,), 1)
    assert b.ttft_s == pytest.approx(FIXED + 1 * LIN + LATENCY + 399 * BPT / LOAD_BW)


def test_a_lower_tier_serves_what_the_upper_one_lost() -> None:
    # A one-chunk DRAM tier keeps C's last chunk; the disk (inclusive, written through) still has A's.
    disk = cpu_tier(kind="disk", load_bw_bytes_per_s=1e5, load_latency_s=0.0)
    lim = limits(budget=1024, pool=40)
    lay = layout(tiers=(cpu_tier(capacity_chunks=1), disk), lim=lim)
    *_, b = simulate([req(0.0, 512, 1), req(1.0, 640, 1, 1000), req(2.0, 512, 1)], lay).requests
    assert (b.pool_hit_tokens, b.tier_hit_tokens) == (0, (0, 511))
    assert b.ttft_s == pytest.approx(FIXED + 1 * LIN + 511 * BPT / 1e5)


def test_the_offload_path_costs_each_admitted_request() -> None:
    lay = layout(tiers=(cpu_tier(),), request_s=0.02)
    (r,) = simulate([req(0.0, 64, 1)], lay).requests
    assert r.ttft_s == pytest.approx(FIXED + 64 * LIN + 0.02)


def preemption_case(fast_forward: bool) -> tuple[float, ...]:
    """A and B (32-token prompts, 40 output tokens) in a 6-block pool, by hand:

    step 1: both prefill (2 blocks each, 4 used); step 2: both at 32 tokens, a block each (6 used);
    steps 3-17 decode; step 18: both at 48 tokens need a block, none is left: A, first, preempts B
    (the last admitted), which frees its 3 blocks, tail first: A's new block evicts B's tail. B
    waits (its 2 cached blocks + 2 new ones > the 2 left). A's 5th block (step 34) evicts B's second
    block. A ends at step 40 (40 tokens); step 41 B comes back with 1 block cached: 49 - 16 = 33
    tokens computed again, then 22 more decode steps."""
    lay = layout(lim=limits(pool=6))
    a, b = simulate([req(0.0, 32, 40, 0), req(0.0, 32, 40, 100)], lay, fast_forward=fast_forward).requests
    assert (a.preemptions, b.preemptions, b.preempted_recompute_tokens) == (0, 1, 33)
    assert a.finish_s is not None and b.finish_s is not None and b.ttft_s is not None
    return a.finish_s, b.ttft_s, b.finish_s


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_full_pool_preempts_the_last_admitted_which_still_finishes(fast_forward: bool) -> None:
    a_done, b_ttft, b_done = preemption_case(fast_forward)
    prefill = FIXED + 64 * LIN
    two, one = FIXED + 2 * DECODE, FIXED + DECODE
    assert b_ttft == pytest.approx(prefill)
    assert a_done == pytest.approx(prefill + 16 * two + 23 * one)  # steps 2-17 with B, 18-40 alone
    assert b_done == pytest.approx(a_done + FIXED + 33 * LIN + 22 * one)


def test_a_request_larger_than_the_pool_is_rejected() -> None:
    res = simulate([req(0.0, 200, 1), req(0.0, 32, 1, 100)], layout(lim=limits(pool=10)))
    big, small = res.requests
    assert big.rejected and big.ttft_s is None
    assert small.ttft_s == pytest.approx(FIXED + 32 * LIN)
    assert res.summary().rejected == 1


def test_idle_time_is_skipped_and_the_busy_fraction_counts_steps_only() -> None:
    res = simulate([req(0.0, 64, 1), req(10.0, 64, 1, 100)], layout())
    step = FIXED + 64 * LIN
    assert res.steps == 2
    assert res.duration_s == pytest.approx(10.0 + step)
    assert res.busy_fraction == pytest.approx(2 * step / (10.0 + step))
    assert res.requests[1].ttft_s == pytest.approx(step)


def test_shares_split_every_prompt_token_by_source() -> None:
    res = simulate([req(0.0, 161, 1), req(1.0, 161, 1)], layout())
    assert res.shares() == pytest.approx({"engine": 160 / 322, "recomputed": 162 / 322})


@pytest.mark.parametrize(
    ("kw", "waits"),
    [
        ({}, False),
        ({"decode_s_per_kv_token": 1e-6}, False),  # the decode steps grow with the KV: summed in closed form
        ({}, True),  # the disk's requests wait for their loads beside the decode runs
    ],
)
def test_fast_forward_changes_no_result(kw: dict[str, float], waits: bool) -> None:
    """A loaded synthetic workload through a small pool and two tiers, steps one by one or decode
    runs in one go: every request's figures agree."""
    costs = COSTS.model_copy(update=kw)
    disk = cpu_tier(kind="disk", capacity_chunks=64, overlapped=True, load_waits=waits)
    tiers = (cpu_tier(capacity_chunks=8), disk)
    lay = layout(costs, tiers, lim=limits(budget=256, seqs=6, pool=120))
    work = synthetic(
        requests=120, rate_per_s=8.0, prompt_tokens=600, output_tokens=40, shared_prefix_share=0.5,
        prefix_groups=3, jitter=0.5, seed=7,
    )  # fmt: skip
    fast, slow = simulate(work, lay), simulate(work, lay, fast_forward=False)
    assert fast.steps == slow.steps
    assert sum(r.preemptions for r in fast.requests) > 0  # the case covers preemption
    assert sum(sum(r.tier_hit_tokens) for r in fast.requests) > 0  # and the tiers
    for f, s in zip(fast.requests, slow.requests, strict=True):
        assert (f.pool_hit_tokens, f.tier_hit_tokens, f.preemptions) == (
            s.pool_hit_tokens,
            s.tier_hit_tokens,
            s.preemptions,
        )
        assert f.ttft_s == pytest.approx(s.ttft_s, rel=1e-9)
        assert f.finish_s == pytest.approx(s.finish_s, rel=1e-9)


def test_fast_forward_stops_where_a_blocked_heads_cached_prefix_would_go() -> None:
    """A decodes alone while H waits for room, its prefix cached free: Y's block 1 (the oldest free
    block), then X's block 51. Ids that are not a prefix chain (51 follows 50 in X, 1 in H) make the
    oldest free block H's first: A's next block evicts it, H's hit drops to nothing, and H, asking
    fewer blocks, gets in that step. A run of A's steps taken in one go must stop there."""
    lay = Layout(
        costs=COSTS,
        limits=SchedulerLimits(max_num_batched_tokens=32, max_num_seqs=2, block_tokens=BT, pool_blocks=6),
    )
    work = [
        SimRequest(0.0, 17, 60, (900, 901), BT),  # A
        SimRequest(0.05, 17, 1, (1, 2), BT),  # Y
        SimRequest(0.10, 33, 1, (50, 51, 52), BT),  # X
        SimRequest(0.3, 64, 2, (1, 51, 60, 61), BT),  # H
    ]
    fast, slow = simulate(work, lay), simulate(work, lay, fast_forward=False)
    assert [r.ttft_s for r in fast.requests] == pytest.approx([r.ttft_s for r in slow.requests], rel=1e-12)
    h = slow.requests[3]
    assert (h.pool_hit_tokens, h.recomputed_tokens) == (0, 64)  # its cached prefix was gone


def test_a_closed_loop_sends_each_clients_next_request_when_its_last_finished() -> None:
    # One client: each 32-token prompt (one step of 10 + 32 ms, one output token) goes out when the
    # one before it finished, whatever its arrival_s says.
    one = FIXED + 32 * LIN
    reqs = [req(5.0 * i, 32, 1, first_id=10 * i) for i in range(3)]
    res = simulate(reqs, layout(), clients=1)
    assert [r.arrival_s for r in res.requests] == pytest.approx([0.0, one, 2 * one])
    assert all(r.ttft_s == pytest.approx(one) for r in res.requests)
    # Two clients: the first two at once (one step of 64 prompt tokens), the third when they finish.
    two = FIXED + 64 * LIN
    res = simulate(reqs, layout(), clients=2)
    assert [r.arrival_s for r in res.requests] == pytest.approx([0.0, 0.0, two])
    assert res.requests[2].ttft_s == pytest.approx(one)
    with pytest.raises(ValueError, match="client"):
        simulate(reqs, layout(), clients=0)


def test_a_round_starts_when_the_last_of_the_round_before_finished() -> None:
    # Round 1's request arrives 1 s after round 0's last finished, not at 1 s: it hits round 0's prompt.
    first = FIXED + 64 * LIN
    reqs = [req(0.0, 64, 1), replace(req(1.0, 64, 1), round=1)]
    a, b = simulate(reqs, layout()).requests
    assert a.finish_s == pytest.approx(first)
    assert b.arrival_s == pytest.approx(first + 1.0) and b.pool_hit_tokens == 48
    # Closed, the next round's first requests go out the moment the round before ends.
    _, b = simulate(reqs, layout(), clients=4).requests
    assert b.arrival_s == pytest.approx(first)
    with pytest.raises(ValueError, match="round"):
        replace(req(0.0, 16, 1), round=-1)


def test_busy_time_is_charged_to_what_spent_it() -> None:
    # 100 tokens: chunks of 64 and 36 (2 steps, 100 prefill tokens), then 3 decode steps of 1 sequence.
    res = simulate([req(0.0, 100, 4)], layout())
    assert res.busy_by["prefill"] == pytest.approx(100 * LIN)
    assert res.busy_by["decode"] == pytest.approx(3 * DECODE)
    assert res.busy_by["step"] == pytest.approx(5 * FIXED)
    assert sum(res.busy_by.values()) == pytest.approx(res.busy_s)
    assert res.summary().busy_share_by["prefill"] == pytest.approx(100 * LIN / res.duration_s)


def test_a_tiers_loads_and_stores_are_charged_to_it_and_its_request_cost_to_the_step() -> None:
    # evicted_from_pool's three requests: A's and C's two whole chunks each stored, A again loaded.
    lay = layout(tiers=(cpu_tier(),), lim=limits(budget=1024, pool=40), request_s=0.003)
    res = simulate([req(0.0, 512, 1), req(1.0, 640, 1, 1000), req(2.0, 512, 1)], lay)
    stored = 4 * 256 * BPT / STORE_BW
    loaded = LATENCY + 511 * BPT / LOAD_BW
    assert res.busy_by["cpu"] == pytest.approx(stored + loaded)
    assert res.busy_by["step"] == pytest.approx(res.steps * FIXED + 3 * 0.003)
    assert sum(res.busy_by.values()) == pytest.approx(res.busy_s)  # nothing overlapped


def test_time_outside_the_engine_is_in_each_ttft_and_before_a_clients_next_request() -> None:
    one = FIXED + 32 * LIN
    lay = layout().model_copy(update={"outside_s": 0.005})
    reqs = [req(0.0, 32, 1), req(0.0, 32, 1, first_id=10)]
    a, b = simulate(reqs, lay, clients=1).requests
    assert a.arrival_s == 0.0 and a.ttft_s == pytest.approx(0.005 + one)
    assert b.arrival_s == pytest.approx(0.005 + one) and b.ttft_s == pytest.approx(0.005 + one)
    assert simulate(reqs[:1], lay).busy_s == pytest.approx(one)  # the engine is not busy with it


def test_the_engines_limits_raise_a_budget_under_its_sequences_and_hold_its_longest_request() -> None:
    lim = SchedulerLimits.of_engine(batched_tokens=64, max_seqs=128, block_tokens=16, pool_tokens=1000)
    # every running sequence gets its token each step (vLLM's SchedulerConfig): the budget is raised
    assert (lim.max_num_batched_tokens, lim.max_num_seqs, lim.pool_blocks) == (128, 128, 62)
    held = SchedulerLimits.of_engine(
        batched_tokens=2048,
        max_seqs=8,
        block_tokens=16,
        pool_tokens=160,
        min_pool_blocks=40,
        prefix_caching=False,
    )
    assert (held.pool_blocks, held.prefix_caching, held.chunked_prefill) == (40, False, True)
    assert (
        SchedulerLimits.of_engine(batched_tokens=8, max_seqs=2, block_tokens=16, pool_tokens=0).pool_blocks
        == 1
    )
