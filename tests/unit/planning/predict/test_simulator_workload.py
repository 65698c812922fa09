"""planning/predict/simulator/inputs.py and workload.py: a trace row's 512-token ids split into the
engine's blocks and the tiers' chunks, the replay's scaling and cuts, the synthetic workload, and
the inputs' own checks, each worked out by hand."""

from __future__ import annotations

from itertools import pairwise

import pytest
from pydantic import ValidationError

from kvstack.planning.predict.simulator import (
    Layout,
    SchedulerLimits,
    SimRequest,
    StepCosts,
    TierSpec,
    at_multiplier,
    from_trace,
    rate_per_s,
    simulate,
    synthetic,
    unit_keys,
)
from kvstack.traces.mooncake import TraceRow


def row(ts_ms: float, tokens: int, ids: list[int], output: int = 5) -> TraceRow:
    return TraceRow(timestamp_ms=ts_ms, input_length=tokens, output_length=output, hash_ids=ids)


def test_a_512_token_id_splits_into_32_engine_blocks_keyed_by_their_last_token() -> None:
    # 1,100 tokens over ids 7, 8, 9: 68 whole 16-token blocks; block b ends at token 16b + 15, in
    # id (16b + 15) // 512 at offset (16b + 15) % 512.
    keys = unit_keys((7, 8, 9), 512, 16, 1100)
    assert len(keys) == 1100 // 16 == 68
    assert keys[:2] == [7 * 512 + 15, 7 * 512 + 31]
    assert keys[31] == 7 * 512 + 511  # the first id's last block
    assert keys[32] == 8 * 512 + 15  # the second id's first
    assert keys[67] == 9 * 512 + 63  # tokens 1072..1087, offset 63 in the third id


def test_the_tiers_chunks_are_keyed_like_the_block_they_end_with() -> None:
    chunks = unit_keys((7, 8, 9), 512, 256, 1100)
    assert chunks == [7 * 512 + 255, 7 * 512 + 511, 8 * 512 + 255, 8 * 512 + 511]
    blocks = unit_keys((7, 8, 9), 512, 16, 1100)
    assert chunks == [blocks[16 * (j + 1) - 1] for j in range(4)]


def test_blocks_straddling_ids_take_the_id_of_their_last_token() -> None:
    # 48-token blocks over 64-token ids: block 1 (tokens 48..95) ends in id 1 at offset 31.
    assert unit_keys((3, 4, 5), 64, 48, 150) == [3 * 64 + 47, 4 * 64 + 31, 5 * 64 + 15]


def test_prompts_sharing_leading_ids_share_exactly_those_blocks() -> None:
    a = unit_keys((0, 1, 2), 512, 16, 1536)
    b = unit_keys((0, 1, 3), 512, 16, 1536)
    assert a[:64] == b[:64] and not set(a[64:]) & set(b[64:])


def test_a_trace_row_becomes_a_request_on_the_trace_clock() -> None:
    rows = [row(1000.0, 1100, [7, 8, 9]), row(3500.0, 600, [7, 10], output=0)]
    a, b = from_trace(rows)
    assert (a.arrival_s, a.prompt_tokens, a.output_tokens, a.prefix_ids, a.id_tokens) == (
        0.0,
        1100,
        5,
        (7, 8, 9),
        512,
    )
    assert (b.arrival_s, b.output_tokens) == (2.5, 1)  # at least one output token, as bench sends
    assert [r.arrival_s for r in from_trace(rows, time_scale=0.5)] == [0.0, 1.25]


def test_a_prompt_scale_shrinks_each_id_to_block_tokens() -> None:
    # --block-tokens 64: 1,100 tokens over 3 ids of 512 -> round(1100 x 64 / 512) = 138 over 3 ids
    # of 64 (traces/sample.py scale_request); the engine's 16-token blocks split each id in 4.
    (r,) = from_trace([row(0.0, 1100, [7, 8, 9])], block_tokens=64)
    assert (r.prompt_tokens, r.id_tokens, r.prefix_ids) == (138, 64, (7, 8, 9))
    keys = unit_keys(r.prefix_ids, r.id_tokens, 16, r.prompt_tokens)
    assert keys == [i * 64 + o for i in (7, 8) for o in (15, 31, 47, 63)]


def test_the_replays_cuts_context_alignment_and_short_rows() -> None:
    rows = [row(0.0, 1100, [7, 8, 9], output=900), row(10.0, 100, [11])]
    (r,) = from_trace(rows, max_prompt_tokens=1000, max_output_tokens=256, align=128)
    # 1,000 tokens cut to whole 128s: 896, over the 2 ids that hold them; the 100-token row is left out.
    assert (r.prompt_tokens, r.output_tokens, r.prefix_ids) == (896, 256, (7, 8))


def test_a_rate_multiplier_divides_the_arrivals() -> None:
    reqs = from_trace([row(0.0, 600, [1, 2]), row(2000.0, 600, [1, 3]), row(4000.0, 600, [1, 4])])
    assert rate_per_s(reqs) == pytest.approx(2 / 4.0)
    faster = at_multiplier(reqs, 4.0)
    assert [r.arrival_s for r in faster] == [0.0, 0.5, 1.0]
    assert rate_per_s(faster) == pytest.approx(2.0)


def test_the_synthetic_workload_shares_its_prefix_within_a_group() -> None:
    work = synthetic(
        requests=50, rate_per_s=5.0, prompt_tokens=640, output_tokens=8, shared_prefix_share=0.5,
        prefix_groups=2, seed=3,
    )  # fmt: skip
    assert work == synthetic(
        requests=50, rate_per_s=5.0, prompt_tokens=640, output_tokens=8, shared_prefix_share=0.5,
        prefix_groups=2, seed=3,
    )  # fmt: skip
    heads = {r.prefix_ids[:20] for r in work}  # 320 shared tokens: 20 ids of 16
    assert len(heads) == 2  # one prefix per group
    assert len({r.prefix_ids[20:] for r in work}) == 50  # the rest each request's own
    assert all(r.prompt_tokens == 640 and r.output_tokens == 8 for r in work)
    gaps = [b.arrival_s - a.arrival_s for a, b in pairwise(work)]
    assert all(g > 0 for g in gaps)
    assert rate_per_s(synthetic(requests=4000, rate_per_s=5.0, prompt_tokens=64, output_tokens=1)) == (
        pytest.approx(5.0, rel=0.05)
    )


def test_the_synthetic_shared_prefix_is_served_from_the_pool() -> None:
    # 10 requests, 2 of 4 blocks shared; arriving far apart, each after the first hits 32 tokens.
    costs = StepCosts(fixed_s=0.01, prefill_s_per_token=0.001, decode_s_per_seq=0.0)
    lim = SchedulerLimits(max_num_batched_tokens=256, max_num_seqs=4, block_tokens=16, pool_blocks=1000)
    work = synthetic(
        requests=10, rate_per_s=0.01, prompt_tokens=64, output_tokens=1, shared_prefix_share=0.5, seed=1
    )
    res = simulate(work, Layout(costs=costs, limits=lim))
    assert [r.pool_hit_tokens for r in res.requests] == [0] + [32] * 9


def test_inputs_refuse_what_the_engine_would() -> None:
    lim = SchedulerLimits(max_num_batched_tokens=64, max_num_seqs=8, block_tokens=16, pool_blocks=10)
    costs = StepCosts(fixed_s=0.01, prefill_s_per_token=0.001, decode_s_per_seq=0.0)
    with pytest.raises(ValidationError, match="at least max_num_seqs"):
        SchedulerLimits(max_num_batched_tokens=8, max_num_seqs=16, block_tokens=16, pool_blocks=10)
    tier = dict(
        kind="cpu", capacity_chunks=1, bytes_per_token=1.0, load_bw_bytes_per_s=1.0, store_bw_bytes_per_s=1.0
    )
    with pytest.raises(ValidationError, match="whole number of the engine's blocks"):
        Layout(costs=costs, limits=lim, tiers=(TierSpec.model_validate({**tier, "chunk_tokens": 24}),))
    with pytest.raises(ValidationError, match="one chunk size"):
        Layout(
            costs=costs,
            limits=lim,
            tiers=tuple(TierSpec.model_validate({**tier, "chunk_tokens": c}) for c in (256, 512)),
        )
    with pytest.raises(ValidationError, match="Extra inputs"):
        StepCosts.model_validate(
            {"fixed_s": 0.0, "prefill_s_per_token": 0.0, "decode_s_per_seq": 0.0, "x": 1}
        )
    with pytest.raises(ValueError, match="cover the prompt"):
        SimRequest(0.0, 600, 1, (1,), 512)
    with pytest.raises(ValueError, match="same number of tokens"):
        simulate(
            [SimRequest(0.0, 16, 1, (1,), 16), SimRequest(0.0, 16, 1, (1,), 512)],
            Layout(costs=costs, limits=lim),
        )
