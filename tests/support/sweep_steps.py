"""A sweep step with round figures, for tests that need one without running a sweep."""

from __future__ import annotations

from kvstack.bench.schema import Distribution, Summary
from kvstack.bench.sweep.schema import SweepStep


def dist(value: float, n: int = 10) -> Distribution:
    return Distribution(n=n, mean=value, p50=value, p90=value, p99=value, min=value, max=value)


def step(
    load: float, meets: bool, *, ttft: float = 0.1, e2e: float = 0.5, shares: dict[str, float] | None = None
) -> SweepStep:
    """10 requests of 1,000 prompt and 10 output tokens over 2 s (5 requests/s)."""
    summary = Summary(
        requests=10,
        ok=10,
        errors=0,
        wall_s=2.0,
        requests_per_s=5.0,
        output_tokens_per_s=50.0,
        prompt_tokens=10_000,
        expected_prefix_tokens=0,
        output_tokens=100,
        ttft_s=dist(ttft),
        e2e_s=dist(e2e),
    )
    return SweepStep(
        step=0,
        origin="ladder",
        load=load,
        seed=0,
        complete=True,
        summary=summary,
        within_slo=10 if meets else 0,
        share_within_slo=1.0 if meets else 0.0,
        meets_slo=meets,
        prompt_token_shares=shares if shares is not None else {"recomputed": 0.5, "dram": 0.5},
    )
