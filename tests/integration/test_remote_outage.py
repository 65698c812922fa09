"""Redis goes away while serving with a remote tier (issue 7), with a real redis-server.

The engine side is the stand-in server (tests/support/stream_server.py): a real engine's remote
tier needs LMCache on a GPU; tests/e2e/test_serve_fault_stack.py drives the same outage through a
real vLLM with LMCache wired (degraded on this CPU-only machine).
"""

from __future__ import annotations

import time

from kvstack.serving.remote_watch import RemoteWatch
from kvstack.validation import TierTarget, ValidationReport, ValidationTarget, run_validation
from tests.support.redis import RedisFactory, RedisServer
from tests.support.stream_server import ServerKnobs, StreamServer

PASSWORD = "outage-test-pw-7"


def _wait_changes(watch: RemoteWatch, timeout_s: float = 5.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if changes := watch.changes():
            return changes
        time.sleep(0.05)
    return []


def test_the_watch_reports_the_store_leaving_and_coming_back(redis_factory: RedisFactory) -> None:
    store = redis_factory(password=PASSWORD)
    with RemoteWatch(store.url, every_s=0.1) as watch:
        time.sleep(0.5)
        assert watch.changes() == []  # reachable all along: nothing to say
        store.stop()
        gone = _wait_changes(watch)
        store.start()
        back = _wait_changes(watch)
    assert len(gone) == 1 and "unreachable" in gone[0] and "keeps serving" in gone[0]
    assert f"127.0.0.1:{store.port}" in gone[0]
    assert len(back) == 1 and "reachable again" in back[0]
    assert PASSWORD not in gone[0] + back[0]


def _validate(srv: StreamServer, store: RedisServer) -> ValidationReport:
    return run_validation(
        ValidationTarget(
            base_url=srv.url,
            tiers=[TierTarget(kind="remote", url=store.url)],
            repeat=2,
            prompt_tokens=1024,
            secrets=[PASSWORD],
        )
    )


def test_validate_fails_the_remote_tier_naming_the_store(redis_factory: RedisFactory) -> None:
    store = redis_factory(password=PASSWORD)
    with StreamServer(ServerKnobs(connector="lmcache")) as srv:
        up = _validate(srv, store)
        store.stop()
        down = _validate(srv, store)
    step_up = up.step("tier:remote")
    assert step_up is not None and step_up.verdict == "pass", up.to_json()
    assert any("answers" in e for e in step_up.evidence)
    assert up.overall == "PASS"

    # The engine keeps serving: cold and warm still pass; the tier fails and says why.
    assert {s.name: s.verdict for s in down.steps}["warm"] == "pass"
    step = down.step("tier:remote")
    assert step is not None and step.verdict == "fail"
    assert step.reason.startswith(f"the remote store redis://:***@127.0.0.1:{store.port}/0 is unreachable")
    assert "cannot connect" in step.reason
    assert down.overall == "FAIL"
    assert PASSWORD not in down.to_json() and PASSWORD not in up.to_json()
