"""Plans sized from a trace: the curve replaces the retention rule, the hierarchy is simulated at the
sizes chosen, and --offload auto follows the trace's verdict on offload."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstack.errors import InputError
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.planning.plan import PlanRequest, SizingTrace, make_plan
from kvstack.planning.predict import trace_sizing
from kvstack.planning.predict.capacity import capacity_curve, simulate_hierarchy
from kvstack.planning.predict.served_ttft import ServedCalibration, ServedCosts
from kvstack.planning.schema import FetchPath, Plan, Tier, TtftModel
from kvstack.planning.workload import default_workload
from kvstack.traces.mooncake import TraceRow, read_trace

from .helpers import catalog_model, roomy_cpu_host, snapshot

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "tests" / "fixtures" / "traces" / "conversation_1in40.jsonl"
FULL = REPO.parent / "shared" / "traces" / "conversation_trace.jsonl"
GIB = 1 << 30


def _plan(hw: str | HardwareSnapshot = "h100-sxm", trace: SizingTrace | None = None, **req: object) -> Plan:
    geo = catalog_model("llama-3.1-8b")
    request = PlanRequest(**{"context": 131072, "users": 8, **req})  # type: ignore[arg-type]
    snap = snapshot(hw) if isinstance(hw, str) else hw
    return make_plan(snap, geo, geo.name, request, default_workload(geo.max_context), trace)


def _fixture(**kw: object) -> SizingTrace:
    t = read_trace(FIXTURE)
    return SizingTrace(t.requests, t.block_tokens, str(FIXTURE), **kw)  # type: ignore[arg-type]


def test_the_trace_sizes_the_tiers_and_says_so() -> None:
    trace = _fixture()
    plan = _plan(trace=trace)
    rule = _plan()
    assert (plan.sized_by, rule.sized_by) == ("trace", "rule")
    t = plan.trace
    assert t is not None and t.evidence == "trace"
    curve = capacity_curve(trace.requests)
    block = 512 * 64 * 1024  # FP8 llama-3.1-8b: 64 KiB/token
    assert t.block_bytes == block
    assert t.target_bytes == curve.blocks_for(0.95) * block
    assert plan.concurrency is not None and plan.concurrency.retention_target_bytes == t.target_bytes
    assert "from the trace" in plan.reasons["retention"]
    assert "retention rule is not used" in plan.reasons["sizing"]
    assert "sizing" not in rule.reasons
    # The rule keeps 10 working sets (640 GiB); this trace's sessions need far less.
    assert rule.concurrency is not None and rule.concurrency.retention_target_bytes == 640 * GIB
    assert t.target_bytes < 640 * GIB
    assert max(x.size_bytes for x in plan.cache.tiers) >= t.target_bytes


def test_tier_shares_are_the_simulated_hierarchy_at_the_planned_sizes() -> None:
    trace = _fixture()
    plan = _plan("l40s", trace=trace)  # a 24 GiB pool: this sample's target needs a DRAM tier
    t = plan.trace
    assert t is not None
    sizes = [x.size_bytes // t.block_bytes for x in plan.cache.tiers]
    sim = simulate_hierarchy(trace.requests, sizes)
    assert [s.hit_tokens for s in t.tiers] == sim.hit_tokens
    assert [s.kind for s in t.tiers] == ["engine", *(x.kind for x in plan.cache.tiers[1:])]
    # Inclusive tiers together serve no more than one LRU cache as large as the largest.
    curve = capacity_curve(trace.requests)
    assert sum(sim.hit_tokens) <= curve.tokens_at(max(sizes))
    labels = [row.label for row in t.table]
    assert {"engine", "cpu", "target", "max"} <= set(labels)
    assert [r.size_bytes for r in t.table] == sorted(r.size_bytes for r in t.table)
    assert t.curve and all(a.hit_ratio <= b.hit_ratio for a, b in zip(t.curve, t.curve[1:], strict=False))


def test_offload_that_pays_is_kept_with_the_ttft_prediction() -> None:
    plan = _plan("l40s", trace=_fixture())
    t = plan.trace
    assert t is not None and t.with_offload is not None and t.without_offload is not None
    assert t.offload_pays is True and plan.transfer.connector == "lmcache-mp"
    # A cost high enough turns it around: at 5 s a request the path costs more than it saves.
    costly = _plan("l40s", trace=_fixture(offload_cost_s=5.0, offload_cost_source="--offload-cost"))
    assert (
        costly.transfer.connector == "none"
        and costly.trace is not None
        and costly.trace.offload_pays is False
    )
    assert t.with_offload.recomputed_tokens < t.without_offload.recomputed_tokens
    assert t.with_offload.mean_s < t.without_offload.mean_s
    assert t.verdict.startswith("offload pays on this trace")
    # With and without each tier: the pool alone, then one tier more at a time.
    assert [d.tiers for d in t.by_depth] == ["engine", "engine+cpu"]
    assert (t.by_depth[0], t.by_depth[-1]) == (t.without_offload, t.with_offload)
    assert t.offload_cost_s == trace_sizing.OFFLOAD_REQUEST_COST_S


def test_auto_drops_offload_that_does_not_pay() -> None:
    # BF16 KV on an H100: the sample's target (66 GiB) is just above the 55 GiB pool, so a DRAM tier
    # would add little hit for its 15 ms per request.
    costly = _fixture()
    plan = _plan(trace=costly, kv_dtype="auto")
    assert plan.transfer.connector == "none" and [x.kind for x in plan.cache.tiers] == ["gpu"]
    assert plan.trace is not None and plan.trace.offload_pays is False
    assert plan.reasons["offload"].startswith("none (--offload auto): offload does not pay on this trace")
    assert any(w.startswith("offload does not pay on this trace") for w in plan.warnings)
    assert not any(w.startswith("--offload none:") for w in plan.warnings)
    # Asked for by name, the connector stays, with the verdict as a warning.
    forced = _plan(trace=costly, kv_dtype="auto", offload="lmcache")
    assert forced.transfer.connector == "lmcache"
    assert any("offload planned as asked: --offload lmcache" in w for w in forced.warnings)


def test_a_shortfall_is_named() -> None:
    plan = _plan("tight-cgroup", trace=_fixture(), kv_dtype="auto", disk_tier=False)
    t = plan.trace
    assert t is not None
    held = max(x.size_bytes for x in plan.cache.tiers)
    assert held < t.target_bytes
    assert t.shortfall.startswith("the tiers hold") and "the hardware allows no more" in t.shortfall
    assert t.shortfall in plan.warnings


def test_retain_and_trace_both_sizing_is_bad_input() -> None:
    with pytest.raises(InputError, match="--retain and --trace"):
        _plan(trace=_fixture(), retain_factor=10.0)


def test_cpu_platform_sizes_from_the_trace_without_a_ttft_verdict() -> None:
    # One user: the engine's pool is one 128K session (16 GiB), the DRAM tier holds the rest.
    plan = _plan(roomy_cpu_host(256), trace=_fixture(), users=1)
    assert plan.platform == "cpu" and plan.trace is not None and plan.transfer.connector == "lmcache-mp"
    assert sum(s.hit_ratio for s in plan.trace.tiers[1:]) >= trace_sizing.NEGLIGIBLE_SHARE
    assert plan.trace.offload_pays is None and "no prefill figure" in plan.trace.verdict


def _measured(offload_fixed_s: float) -> ServedCalibration:
    """Costs as bench --trace measured them on the demo (README: 51.1 ms a request on none, 103 us a
    token recomputed, a DRAM fetch 3.8 us a token), the offload layout's fixed cost as given."""
    plain = ServedCosts(0.0411, 0.010, 1.03e-4, 3.4e-8, {}, "test")
    offload = ServedCosts(0.0411, offload_fixed_s - 0.0411, 1.03e-4, 3.4e-8, {"dram": 3.8e-6}, "test")
    return ServedCalibration(plain, offload, "none", "lmcache-mp", "bench --trace run X")


def test_cpu_platform_gives_a_ttft_verdict_from_a_served_calibration() -> None:
    trace = _fixture(served=_measured(0.0566))
    plan = _plan(roomy_cpu_host(256), trace=trace, users=1)
    t = plan.trace
    assert plan.platform == "cpu" and t is not None and t.with_offload is not None
    assert t.without_offload is not None
    assert [d.tiers for d in t.by_depth] == ["engine", "engine+cpu", "engine+cpu+disk"]
    assert t.offload_pays is True and plan.transfer.connector == "lmcache-mp"
    assert t.offload_cost_s == pytest.approx(0.0055)
    assert "56.6 ms on lmcache-mp vs 51.1 ms on none, bench --trace run X" in t.offload_cost_source
    # The prediction is the calibration's, request by request, at the simulated sources.
    sizes = [x.size_bytes // t.block_bytes for x in plan.cache.tiers]
    sim = simulate_hierarchy(trace.requests, sizes, readmit=False)
    assert trace.served is not None and trace.served.offload is not None
    off = trace.served.offload
    # The disk tier has no fetch figure of its own: it is taken at DRAM's.
    expected = [
        off.ttft(
            r.input_length, sim.per_request[0][i], {"dram": sim.per_request[1][i] + sim.per_request[2][i]}
        )
        for i, r in enumerate(trace.requests)
    ]
    assert t.with_offload.mean_s == pytest.approx(sum(expected) / len(expected))
    assert t.with_offload.recomputed_tokens == sim.recomputed_tokens
    # An offload path costing seconds a request does not pay: --offload auto plans none.
    costly = _plan(roomy_cpu_host(256), trace=_fixture(served=_measured(5.0)), users=1)
    assert (
        costly.trace is not None
        and costly.trace.offload_pays is False
        and costly.transfer.connector == "none"
    )
    assert costly.reasons["offload"].startswith("none (--offload auto): offload does not pay on this trace")


def _demo_plan(trace: SizingTrace, **req: object) -> Plan:
    from kvstack.model.source import resolve_model
    from kvstack.profiles import profiles_dir

    found = resolve_model(str(profiles_dir() / "demo"))
    request = PlanRequest(**req)  # type: ignore[arg-type]
    wl = default_workload(found.geometry.max_context)
    return make_plan(snapshot("no-gpu"), found.geometry, found.path, request, wl, trace)


def test_cpu_auto_drops_an_offload_path_whose_tiers_serve_nothing() -> None:
    # The issue's case: the demo's 1 GiB pool holds 1M tokens, all this sample reuses; LMCache is
    # installed, and without a TTFT figure the plan used to keep lmcache-mp for nothing.
    plan = _demo_plan(_fixture())
    t = plan.trace
    assert t is not None and plan.platform == "cpu"
    assert [s.kind for s in t.tiers] == ["engine", "cpu", "disk"]  # considered, then dropped
    served = sum(s.hit_ratio for s in t.tiers[1:])
    assert served < trace_sizing.NEGLIGIBLE_SHARE and t.tiers[0].hit_ratio > 0.4
    assert plan.transfer.connector == "none" and [x.kind for x in plan.cache.tiers] == ["cpu"]
    assert t.offload_pays is False
    why = plan.reasons["offload"]
    assert why.startswith("none (--offload auto): offload does not pay on this trace")
    assert f"the offload tiers serve {served:.1%} of prompt tokens" in why and "15 ms" in why
    assert plan.reasons["connector"] == "none: offload does not pay on this trace"
    # Named, the connector stays, with the verdict as a warning.
    forced = _demo_plan(_fixture(), offload="lmcache-mp")
    assert forced.transfer.connector == "lmcache-mp" and forced.trace is not None
    assert any("offload planned as asked: --offload lmcache-mp" in w for w in forced.warnings)


def _synthetic(n: int, shared: int, own: int) -> list[TraceRow]:
    """``n`` requests of one shared prefix (``shared`` blocks) and ``own`` unique blocks each."""
    return [
        TraceRow(
            float(i * 1000),
            (shared + own) * 512,
            1,
            [*range(shared), *range(1000 + i * own, 1000 + (i + 1) * own)],
        )
        for i in range(n)
    ]


def test_tiers_serving_under_the_negligible_share_never_pay_even_when_free() -> None:
    # The pool holds the shared prefix; the one tier below serves a request's repeat only once in
    # 400: a positive TTFT gain at no cost, still within the simulation's error of nothing.
    requests = _synthetic(400, 4, 4)
    requests.append(TraceRow(400_000.0, 8 * 512, 1, list(requests[0].hash_ids)))
    trace = SizingTrace(requests, 512, "synthetic", offload_cost_s=0.0, offload_cost_source="test")
    curve = capacity_curve(requests)
    pool = Tier(kind="gpu", size_bytes=8 * 512, size_bytes_per_rank=8 * 512, tokens=8 * 512)
    dram = Tier(kind="cpu", size_bytes=10_000 * 512, size_bytes_per_rank=10_000 * 512, tokens=10_000 * 512)
    model = TtftModel(
        context_tokens=8 * 512, bytes_per_token=1.0, step_s=0.01, prefill_flops_per_s=1e12,
        linear_flops_per_token=1e9, attn_flops_coeff=1e3, prefill_source="test",
        fetch={"cpu": FetchPath(latency_s=0.0, bw_bytes_per_s=1e12)},
    )  # fmt: skip
    sizing = trace_sizing.trace_sizing(trace, curve, 512, [pool, dram], target=0, ttft=model)
    served = sizing.tiers[1].hit_tokens / sizing.prompt_tokens
    assert 0 < served < trace_sizing.NEGLIGIBLE_SHARE
    assert sizing.with_offload is not None and sizing.without_offload is not None
    assert sizing.with_offload.mean_s < sizing.without_offload.mean_s
    assert sizing.offload_pays is False and "the offload tiers serve 0.1% of prompt tokens" in sizing.verdict


def test_without_a_trace_the_plan_serializes_as_before() -> None:
    dumped = _plan().model_dump(mode="json")
    assert "trace" not in dumped
    assert "trace" in _plan(trace=_fixture()).model_dump(mode="json")


@pytest.mark.skipif(
    not FULL.exists(), reason=f"{FULL} (the shared conversation trace) is not on this machine"
)
def test_the_conversation_trace_curve_matches_the_issue_figures() -> None:
    # Issue 24's held-out analysis: LRU over 512-token blocks, prefix hits only, 32 MiB per block.
    curve = capacity_curve(read_trace(FULL).requests)
    assert (curve.requests, curve.block_refs, curve.distinct_blocks) == (12031, 288500, 182790)
    per_gib = GIB // (32 << 20)
    got = {g: round(100 * curve.ratio_at(g * per_gib), 1) for g in (80, 160, 320, 640, 1280, 2560)}
    assert got == {80: 6.1, 160: 11.7, 320: 21.7, 640: 29.6, 1280: 35.9, 2560: 36.9}
    assert round(100 * curve.max_ratio, 1) == 37.4
