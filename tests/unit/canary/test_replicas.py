"""The canary beside several engines (`kvstack serve --replicas N`): every engine is checked, and
each check names its engine, in its event line, in canary.json's ``replicas`` and in the metrics'
``replica`` label. Against two stand-in engines (real HTTP servers, tests/support/stream_server.py):
one whose offload tier serves its KV right, one whose tier serves wrong tokens."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvstack.canary.checker import CanaryConfig
from kvstack.canary.runner import CanaryRunner, replica_name
from kvstack.canary.state import CanaryState
from kvstack.canary.watch import check_line
from kvstack.serving.wrong_kv import describe
from kvstack.validation.report import TierTarget, ValidationTarget
from tests.support.stream_server import ServerKnobs, StreamServer

TOKEN = "run-control-token-replicas"
# An offload tier serves every re-asked probe (the engine's own cache never hits).
TIERED = ServerKnobs(connector="native", gpu_hit_cap=0)
CONFIG = CanaryConfig(interval_s=0.2, budget=1.0, probe_tokens=64)


def target(srv: StreamServer) -> ValidationTarget:
    return ValidationTarget(
        base_url=srv.url,
        engine="vllm",
        connector="native",
        tiers=[TierTarget(kind="cpu")],
        correctness_tokens=8,
    )


def events(run_dir: Path, kind: str) -> list[dict[str, object]]:
    path = run_dir / "events.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    return [r for r in rows if r["kind"] == kind]


def metrics(runner: CanaryRunner) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    assert runner.metrics is not None
    with httpx.Client(trust_env=False, timeout=10) as client:
        resp = client.get(runner.metrics.url, headers={"Authorization": f"Bearer {TOKEN}"})
    assert resp.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(resp.text)
        for s in family.samples
    }


@pytest.fixture
def engines() -> Iterator[tuple[StreamServer, StreamServer]]:
    with StreamServer(TIERED) as good, StreamServer(replace(TIERED, corrupt_tier_from=0)) as bad:
        yield good, bad


def watched(runner: CanaryRunner, run_dir: Path, done: list[str]) -> CanaryState:
    """The state once every engine named in ``done`` has a failed check and the others a passed one."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = runner.snapshot()
        views = state.replicas
        if len(views) == len(runner.targets) and all(
            v.count("fail" if name in done else "pass") >= 1 for name, v in views.items()
        ):
            return state
        time.sleep(0.1)
    raise AssertionError(f"not every engine was checked: {events(run_dir, 'canary-check')}")


def test_every_replica_is_checked_and_each_check_names_its_engine(
    tmp_path: Path, engines: tuple[StreamServer, StreamServer]
) -> None:
    good, bad = engines
    a, b = replica_name(target(good)), replica_name(target(bad))
    runner = CanaryRunner([target(good), target(bad)], CONFIG, "warn", tmp_path)
    runner.start("127.0.0.1", 0, TOKEN)
    try:
        state = watched(runner, tmp_path, done=[b])
        series = metrics(runner)
        failed = runner.wrong_kv()
    finally:
        runner.stop()
    # Both engines were asked (each its own probes).
    assert good.requests and bad.requests
    # The events: every check names its engine; the right one passes, the wrong one fails.
    checks = events(tmp_path, "canary-check")
    assert {c["replica"] for c in checks} == {a, b}
    assert {c["verdict"] for c in checks if c["replica"] == a} == {"pass"}
    assert "fail" in {c["verdict"] for c in checks if c["replica"] == b}
    assert events(tmp_path, "canary-start")[0]["replicas"] == [a, b]
    # What serving acts on names the engine.
    assert failed and {r.replica for r in failed} == {b}
    assert f"on replica {b} served from" in describe(failed[0])
    assert f"probe {failed[0].probe} on {b} (" in check_line(failed[0])
    # The state: each engine's own, and the run's sums.
    assert state.replicas[a].count("fail") == 0 and state.replicas[b].count("fail") >= 1
    assert state.replicas[b].last_fail is not None and state.replicas[b].last_fail.replica == b
    assert state.total == sum(sum(v.values()) for r in state.replicas.values() for v in r.checks.values())
    assert state.canary_tokens == sum(r.canary_tokens for r in state.replicas.values()) > 0
    written = json.loads((tmp_path / "canary.json").read_text())
    assert set(written["replicas"]) == {a, b} and written["status"] == "stopped"
    # The metrics: one series per engine, labelled with it.
    assert series[("kvstack_canary_wrong_kv", (("replica", a),))] == 0.0
    assert series[("kvstack_canary_wrong_kv", (("replica", b),))] == 1.0
    canary = [labels for (name, labels) in series if name.startswith("kvstack_canary_")]
    assert {dict(labels).get("replica") for labels in canary} == {a, b}
    counted = [v for (name, _), v in series.items() if name == "kvstack_canary_checks_total"]
    assert sum(counted) >= state.total  # the checks go on while the test reads
    assert series[("kvstack_offload_enabled", ())] == 1.0


def test_one_engine_keeps_its_state_and_series_without_a_replica(
    tmp_path: Path, engines: tuple[StreamServer, StreamServer]
) -> None:
    good, _ = engines
    runner = CanaryRunner(target(good), CONFIG, "warn", tmp_path)
    runner.start("127.0.0.1", 0, TOKEN)
    try:
        deadline = time.monotonic() + 60
        while runner.snapshot().count("pass") < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        series = metrics(runner)
    finally:
        runner.stop()
    checks = events(tmp_path, "canary-check")
    assert checks and all("replica" not in c for c in checks)
    assert "replicas" not in events(tmp_path, "canary-start")[0]
    assert "replicas" not in json.loads((tmp_path / "canary.json").read_text())
    assert series[("kvstack_canary_wrong_kv", ())] == 0.0
    assert all("replica" not in dict(labels) for (_, labels) in series)


def test_a_retarget_points_every_engines_checks_anew(
    tmp_path: Path, engines: tuple[StreamServer, StreamServer]
) -> None:
    good, bad = engines
    runner = CanaryRunner([target(good), target(bad)], CONFIG, "warn", tmp_path)
    runner.retarget(lambda t: t.model_copy(update={"tiers": [], "connector": None}))
    assert [t.base_url for t in runner.targets.values()] == [good.url, bad.url]
    assert all(t.tiers == [] and t.connector is None for t in runner.targets.values())
