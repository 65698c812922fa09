"""The cross-replica step against two real HTTP servers whose toy engines share (or not) one tier.

Each server (tests/support/stream_server.py) stores every prompt it prefills in its offload
tier and serves later prompts from it; pointing both servers at one tier list is what a
shared remote tier is to two engines.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstack.errors import EngineError
from kvstack.hardware.snapshot import load_snapshot
from kvstack.planning.schema import Plan
from kvstack.serving.prepare import prepare
from kvstack.serving.request import ServeRequest
from kvstack.validation import ValidationTarget
from kvstack.validation.replicas import STEP_NAME, shared_tier_skip_reason, shared_tier_step
from tests.support.deps import ROOT
from tests.support.stream_server import ServerKnobs, StreamServer


def target(url: str) -> ValidationTarget:
    return ValidationTarget(base_url=url, repeat=2)


def pair(shared: bool, api_key: str | None = None) -> tuple[StreamServer, StreamServer]:
    knobs = {"connector": "lmcache", "api_key": api_key}
    a, b = StreamServer(ServerKnobs(**knobs)), StreamServer(ServerKnobs(**knobs))  # type: ignore[arg-type]
    if shared:
        b.state.tier = a.state.tier  # one store behind both, as Redis is behind both replicas
    return a.start(), b.start()


def test_a_prefix_computed_on_one_replica_is_a_hit_on_the_other() -> None:
    a, b = pair(shared=True)
    try:
        step = shared_tier_step(target(a.url), target(b.url), "vllm", 1024)
        served_by_b = [r["tier_hit"] for r in b.requests]
    finally:
        a.stop()
        b.stop()
    assert step.name == STEP_NAME and step.verdict == "pass", step
    assert served_by_b == [1008, 1008]  # whole blocks but the last token, from the shared tier
    assert len(a.requests) == 2 and all(r["tier_hit"] == 0 for r in a.requests)  # computed there
    assert f"{b.url}: vllm:external_prefix_cache_hits +2016" in step.evidence
    assert step.ttft_s is not None and len(step.ttfts_s) == 2
    assert step.evidence[0].startswith(f"median TTFT on {b.url}")


def test_replicas_that_share_nothing_fail_with_the_reason() -> None:
    a, b = pair(shared=False)
    try:
        step = shared_tier_step(target(a.url), target(b.url), "vllm", 512, settle_s=0.05)
    finally:
        a.stop()
        b.stop()
    assert step.verdict == "fail"
    assert step.reason == (
        f"{b.url} served none of the prompts {a.url} computed from the shared tier: "
        "its connector hit counters did not rise"
    )


def test_a_replica_without_connector_counters_fails() -> None:
    a = StreamServer(ServerKnobs(connector="lmcache")).start()
    b = StreamServer(ServerKnobs(metrics=False)).start()
    try:
        step = shared_tier_step(target(a.url), target(b.url), "vllm", 256, settle_s=0.05)
    finally:
        a.stop()
        b.stop()
    assert step.verdict == "fail" and step.reason == f"{b.url} shows no connector hit counters at /metrics"


def test_the_api_key_reaches_both_replicas_and_a_death_check_runs_between_requests() -> None:
    a, b = pair(shared=True, api_key="sk-r")
    calls: list[int] = []

    def between() -> None:
        calls.append(1)
        if len(calls) == 3:
            raise EngineError("replica 1 engine exited with code 1 during validation")

    try:
        t0 = ValidationTarget(base_url=a.url, api_key="sk-r", repeat=2)
        t1 = ValidationTarget(base_url=b.url, api_key="sk-r", repeat=2)
        with pytest.raises(EngineError, match="replica 1 engine exited"):
            shared_tier_step(t0, t1, "vllm", 256, between=between, settle_s=0.05)
    finally:
        a.stop()
        b.stop()
    assert len(a.requests) == 1 and len(b.requests) == 1  # stopped before the third request


def _plan(tmp_path: Path, hw: str, **kw: object) -> Plan:
    config = ROOT / "tests" / "fixtures" / "configs" / "Llama-3.1-8B.json"
    model = tmp_path / "llama"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(config.read_text())
    req = ServeRequest(
        model=str(model) if hw != "no-gpu.json" else None,
        cache_dir=tmp_path / "c",
        run_dir=tmp_path / "r",
        replicas=2,
        **kw,  # type: ignore[arg-type]
    )
    return prepare(req, load_snapshot(ROOT / "profiles" / "hardware" / hw), env={}).plan


def test_skip_reasons(tmp_path: Path) -> None:
    remote = "redis://127.0.0.1:6379/0"
    gpu_remote = _plan(tmp_path, "8x-h100.json", offload="lmcache", remote=remote)
    assert shared_tier_skip_reason(gpu_remote, 2) is None
    assert shared_tier_skip_reason(gpu_remote, 1) == "one replica: nothing to share with"
    gpu_local = _plan(tmp_path, "8x-h100.json", offload="lmcache")
    assert shared_tier_skip_reason(gpu_local, 2) == (
        "no remote tier (--remote redis://...): each replica keeps its own cache"
    )
    cpu = _plan(tmp_path, "no-gpu.json", offload="lmcache", remote=remote)
    reason = shared_tier_skip_reason(cpu, 2)
    assert reason is not None and reason.startswith("no offload tier on a CPU platform")
    cpu_mp = _plan(tmp_path, "no-gpu.json", offload="lmcache-mp", remote=remote)
    assert shared_tier_skip_reason(cpu_mp, 2) is None  # LMCache's cache servers share Redis
