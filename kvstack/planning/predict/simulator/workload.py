"""The requests a simulation serves: a synthetic workload, a trace's rows, and either at a multiple
of its rate. Pure (kvstack/traces reads the file).

A trace row becomes a request as bench's replay sends it (bench/replay/prompts.py
``plan_requests``): its blocks scaled to ``block_tokens`` (``--block-tokens``, traces/sample.py
``scale_request``: same ids, same block count, the prompt shrunk or grown in proportion), the prompt
cut to the context and to whole multiples of ``align`` tokens (rows shorter are left out), the
output to ``max_output_tokens`` (at least 1), arriving ``(timestamp - first) x time_scale``. The
trace's ids stay whole (``id_tokens`` = its block, scaled): the simulator splits each into its own
blocks and chunks (inputs.py ``unit_keys``).

A synthetic workload: Poisson arrivals at ``rate_per_s``; each prompt ``prompt_tokens`` (uniform
within ``+-jitter`` of it), its first ``shared_prefix_share`` shared with the other requests of its
group (one of ``prefix_groups``, drawn uniformly), the rest its own.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from kvstack.planning.predict.simulator.inputs import SimRequest
from kvstack.traces.mooncake import MOONCAKE_BLOCK_TOKENS, TraceRow
from kvstack.traces.sample import scale_request


def at_multiplier(requests: Sequence[SimRequest], multiplier: float) -> list[SimRequest]:
    """The same requests arriving ``multiplier`` times as fast (a sweep's ``rate:`` step on a trace:
    arrivals divided by the multiple of its rate)."""
    if multiplier <= 0:
        raise ValueError("the rate multiplier must be positive")
    return [replace(r, arrival_s=r.arrival_s / multiplier) for r in requests]


def rate_per_s(requests: Sequence[SimRequest]) -> float:
    """The workload's own rate, as a trace sweep's load 1: requests after the first over the span."""
    if len(requests) < 2:
        return 0.0
    stamps = [r.arrival_s for r in requests]
    span = max(stamps) - min(stamps)
    return (len(requests) - 1) / span if span > 0 else 0.0


def from_trace(
    rows: Sequence[TraceRow],
    *,
    trace_block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    block_tokens: int | None = None,
    max_prompt_tokens: int | None = None,
    max_output_tokens: int | None = None,
    align: int = 1,
    time_scale: float = 1.0,
) -> list[SimRequest]:
    """The rows as requests (see the module's docstring); ``block_tokens`` None keeps the trace's."""
    scale = block_tokens or trace_block_tokens
    t0 = min((r.timestamp_ms for r in rows), default=0.0)
    out: list[SimRequest] = []
    for row in rows:
        r = scale_request(row, scale, trace_block_tokens) if scale != trace_block_tokens else row
        limit = min(r.input_length, len(r.hash_ids) * scale)
        if max_prompt_tokens is not None:
            limit = min(limit, max_prompt_tokens)
        tokens = limit // align * align
        if tokens < max(1, align):
            continue
        output = r.output_length if max_output_tokens is None else min(r.output_length, max_output_tokens)
        output = max(1, output)
        out.append(
            SimRequest(
                arrival_s=(r.timestamp_ms - t0) / 1000.0 * time_scale,
                prompt_tokens=tokens,
                output_tokens=output,
                prefix_ids=tuple(r.hash_ids[: -(-tokens // scale)]),
                id_tokens=scale,
            )
        )
    return out


def synthetic(
    *,
    requests: int,
    rate_per_s: float,
    prompt_tokens: int,
    output_tokens: int,
    shared_prefix_share: float = 0.0,
    prefix_groups: int = 1,
    jitter: float = 0.0,
    id_tokens: int = 16,
    seed: int = 0,
) -> list[SimRequest]:
    """A seeded synthetic workload (see the module's docstring)."""
    if rate_per_s <= 0 or not 0 <= shared_prefix_share <= 1 or not 0 <= jitter < 1 or prefix_groups < 1:
        raise ValueError("rate_per_s > 0, shared_prefix_share in [0, 1], jitter in [0, 1), groups >= 1")
    rng = random.Random(seed)
    shared_ids = round(shared_prefix_share * prompt_tokens) // id_tokens
    next_id = prefix_groups * shared_ids  # group g's shared ids: g x shared_ids .. + shared_ids - 1
    t = 0.0
    out: list[SimRequest] = []
    for _ in range(requests):
        t += rng.expovariate(rate_per_s)
        tokens = max(1, round(prompt_tokens * rng.uniform(1 - jitter, 1 + jitter)))
        group = rng.randrange(prefix_groups)
        n_ids = -(-tokens // id_tokens)
        shared = min(shared_ids, tokens // id_tokens)
        own = n_ids - shared
        ids = (*range(group * shared_ids, group * shared_ids + shared), *range(next_id, next_id + own))
        next_id += own
        out.append(SimRequest(t, tokens, output_tokens, ids, id_tokens))
    return out
