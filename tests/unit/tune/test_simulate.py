"""tune's simulation is planning's hierarchy (planning/predict/capacity.py), organised for many candidates."""

from __future__ import annotations

import pytest

from kvstack.planning.predict.capacity import simulate_hierarchy
from kvstack.traces.mooncake import TraceRow
from kvstack.tune.simulate import TraceSim

from .helpers import sample, whole_blocks

POOL_BLOCKS = 300  # of 128 tokens: the sample's engine pool serves some, the tiers the rest


@pytest.fixture(scope="module")
def sim_and_trace() -> tuple[TraceSim, list[TraceRow]]:
    trace = whole_blocks(sample())
    sim = TraceSim(
        trace.requests, block_tokens=512, engine_block_tokens=128, engine_pool_tokens=POOL_BLOCKS * 128
    )
    return sim, trace.requests


@pytest.mark.parametrize("chunk", [128, 256, 512])
@pytest.mark.parametrize(
    ("dram", "disk", "readmit"),
    [
        (50, 0, True),
        (200, 0, False),
        (100, 2000, False),
        (100, 2000, True),
        (0, 3000, False),
        (400, 500, False),
    ],
)
def test_every_candidates_levels_are_the_planning_simulations(
    sim_and_trace: tuple[TraceSim, list[TraceRow]], chunk: int, dram: int, disk: int, readmit: bool
) -> None:
    sim, requests = sim_and_trace
    got = sim.offload(chunk, dram, disk, readmit=readmit)
    sizes = [POOL_BLOCKS, dram, *([disk] if disk else [])]
    ref = simulate_hierarchy(
        requests, sizes, block_tokens=512, unit_tokens=[128] + [chunk] * (len(sizes) - 1), readmit=readmit
    )
    assert got.engine.tolist() == ref.per_request[0]
    assert got.dram.tolist() == ref.per_request[1]
    assert got.disk.tolist() == (ref.per_request[2] if disk else [0] * len(requests))
    assert sim.offload(chunk, dram, disk, readmit=readmit) is got  # cached


def test_only_whole_chunks_are_offloaded() -> None:
    # One 300-token prompt twice, no engine pool: a 256-token chunk serves 256 tokens of it, a
    # 512-token chunk none (LMCache stores complete chunks only).
    reqs = [TraceRow(float(t), 300, 1, [7]) for t in (0, 1)]
    sim = TraceSim(reqs, block_tokens=512, engine_block_tokens=128, engine_pool_tokens=0)
    assert sim.offload(256, 10, 0, readmit=True).dram.tolist() == [0, 256]
    assert sim.offload(512, 10, 0, readmit=True).dram.tolist() == [0, 0]
    assert sim.offload(128, 10, 100, readmit=False).dram.tolist() == [0, 256]
