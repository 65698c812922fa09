"""kvstack's own /metrics: a real server on loopback, read with a real HTTP client and parsed with
prometheus_client's own text parser, as a Prometheus scrape reads it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvstack.canary.exposition import MetricsServer
from kvstack.canary.state import CanaryState, CheckRecord, FallbackRecord

TOKEN = "run-control-token-4f1c"


class Holder:
    """The serving side's state and its lock; the server reads a copy at every scrape."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state = CanaryState(interval_s=60.0, budget=0.01, on_wrong_kv="fallback")

    def read(self) -> CanaryState:
        with self.lock:
            return self.state.model_copy(deep=True)


@pytest.fixture
def served() -> Iterator[tuple[MetricsServer, Holder]]:
    holder = Holder()
    server = MetricsServer("127.0.0.1", 0, TOKEN, holder.read)
    try:
        yield server, holder
    finally:
        server.close()


def get(url: str, token: str | None = None, scheme: str = "Bearer") -> httpx.Response:
    return get_with(url, f"{scheme} {token}" if token is not None else None)


def get_with(url: str, authorization: str | None) -> httpx.Response:
    headers = {"Authorization": authorization} if authorization is not None else {}
    with httpx.Client(trust_env=False, timeout=10) as client:
        return client.get(url, headers=headers)


def series(resp: httpx.Response) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(resp.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def check(served_from: str, verdict: str, typical: float, at: float) -> CheckRecord:
    return CheckRecord.model_validate(
        {
            "at": at,
            "probe": "Tree-0a1b2c3d4e5f",
            "age_s": 70.0,
            "served_from": served_from,
            "verdict": verdict,
            "typical": typical,
        }
    )


def test_the_url_is_loopback_on_the_port_it_bound(served: tuple[MetricsServer, Holder]) -> None:
    server, _ = served
    port = server.httpd.server_address[1]
    assert port > 0 and server.url == f"http://127.0.0.1:{port}/metrics"


def test_every_request_without_the_runs_bearer_token_gets_401(served: tuple[MetricsServer, Holder]) -> None:
    server, _ = served
    other = server.url.replace("/metrics", "/other")
    for resp in (
        get(server.url),
        get(server.url, "wrong-token"),
        get(server.url, TOKEN + "x"),
        get_with(server.url, "Bearer"),  # the scheme without a token
        get_with(server.url, TOKEN),  # the token without its scheme
        get(server.url, TOKEN, scheme="Basic"),
        get(other),  # the token is asked for before anything else is said
    ):
        assert resp.status_code == 401
        assert resp.headers["WWW-Authenticate"] == "Bearer"
        assert "kvstack_canary" not in resp.text


def test_other_paths_are_404_for_the_owner(served: tuple[MetricsServer, Holder]) -> None:
    server, _ = served
    for path in ("/", "/other", "/metrics/x"):
        assert get(server.url.replace("/metrics", path), TOKEN).status_code == 404


def test_the_owner_reads_the_canarys_series(served: tuple[MetricsServer, Holder]) -> None:
    server, holder = served
    resp = get(server.url, TOKEN)
    assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("text/plain")
    first = series(resp)
    assert first[("kvstack_canary_wrong_kv", ())] == 0.0
    assert first[("kvstack_offload_enabled", ())] == 1.0
    assert not [name for name, _ in first if name.startswith("kvstack_canary_checks")]  # none yet
    now = time.time()
    with holder.lock:
        s = holder.state
        s.gate, s.canary_tokens, s.engine_tokens = 0.35, 3000, 400_000.0
        for served_from, verdict, typical in (
            ("cpu", "pass", 0.05),
            ("cpu", "pass", 0.08),
            ("disk", "pass", 0.06),
            ("disk", "fail", 2.4),
            ("recompute", "unknown", 0.0),
        ):
            s.record(check(served_from, verdict, typical, now - 30))
        s.record(check("cpu", "pass", 0.07, now - 5))
    got = series(get(server.url + "?name[]=x", TOKEN))  # a query string is the same page
    checks = {
        dict(labels)["served_from"] + "/" + dict(labels)["verdict"]: value
        for (name, labels), value in got.items()
        if name == "kvstack_canary_checks_total"
    }
    assert checks == {"cpu/pass": 3.0, "disk/pass": 1.0, "disk/fail": 1.0, "recompute/unknown": 1.0}
    assert got[("kvstack_canary_wrong_kv", ())] == 1.0
    assert got[("kvstack_canary_gate_nats", ())] == 0.35
    assert got[("kvstack_canary_last_disagreement_nats", ())] == 0.07
    assert got[("kvstack_canary_last_pass_timestamp_seconds", ())] == pytest.approx(now - 5)
    assert 5 <= got[("kvstack_canary_seconds_since_last_pass", ())] < 5 + 30
    assert got[("kvstack_canary_prefill_share", ())] == pytest.approx(3000 / 400_000)
    assert got[("kvstack_offload_enabled", ())] == 1.0  # a failed check alone turns nothing off


def test_offload_enabled_drops_to_zero_once_the_fallback_turned_tiers_off(
    served: tuple[MetricsServer, Holder],
) -> None:
    server, holder = served
    with holder.lock:
        holder.state.fallback = FallbackRecord(at=time.time(), action="warn", served_from="disk", detail="x")
    assert series(get(server.url, TOKEN))[("kvstack_offload_enabled", ())] == 1.0  # warned only
    with holder.lock:
        holder.state.fallback = FallbackRecord(
            at=time.time(),
            action="fallback",
            served_from="disk",
            detail="x",
            tiers_off=["cpu", "disk"],
            restarted=1,
        )
    assert series(get(server.url, TOKEN))[("kvstack_offload_enabled", ())] == 0.0


def test_a_closed_server_answers_nothing() -> None:
    holder = Holder()
    server = MetricsServer("127.0.0.1", 0, TOKEN, holder.read)
    url = server.url
    assert get(url, TOKEN).status_code == 200
    server.close()
    server.thread.join(timeout=5)
    assert not server.thread.is_alive()
    with pytest.raises(httpx.ConnectError):
        get(url, TOKEN)
    server.close()  # twice is harmless
