"""The readiness probe and the one wait around it (runtime/readiness.py), against a real HTTP server
in a thread: what counts as ready, how often it is asked, and how soon a death or the deadline ends it."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from kvstack.runtime.readiness import probe_ready, wait_until_ready


@dataclass
class Engine:
    """What the server answers: /health and /v1/models status codes, and the requests it saw."""

    health: int = 200
    models: int = 200
    seen: list[tuple[str, str | None]] = field(default_factory=list)


@pytest.fixture
def engine() -> Iterator[tuple[Engine, str]]:
    state = Engine()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.seen.append((self.path, self.headers.get("Authorization")))
            code = {"/health": state.health, "/v1/models": state.models}.get(self.path, 404)
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_engine_is_ready_once_its_api_routes_serve(engine: tuple[Engine, str]) -> None:
    state, url = engine
    with httpx.Client(trust_env=False) as client:
        assert probe_ready(client, f"{url}/health", api_base_url=url, api_key="sk-1")
        assert state.seen == [("/health", "Bearer sk-1"), ("/v1/models", "Bearer sk-1")]
        state.models = 401  # a key it does not take still proves the routes are up
        assert probe_ready(client, f"{url}/health", api_base_url=url)
        state.models = 404  # /health answers before the API routes do
        assert not probe_ready(client, f"{url}/health", api_base_url=url)
        state.health = 503
        assert not probe_ready(client, f"{url}/health")
        assert probe_ready(client, None)  # nothing to ask: ready once started
        assert not probe_ready(client, "http://127.0.0.1:1/health")  # nothing listening


def test_the_wait_returns_as_soon_as_the_probe_passes(engine: tuple[Engine, str]) -> None:
    state, url = engine
    state.health = 503
    threading.Timer(0.6, lambda: setattr(state, "health", 200)).start()
    t0 = time.monotonic()
    outcome = wait_until_ready(lambda c: probe_ready(c, f"{url}/health"), lambda: False, 10)
    took = time.monotonic() - t0
    assert outcome == "ready"
    assert 0.6 <= took < 0.6 + 1.0 + 0.5  # at most one pause (1 s at the most) after it passed


def test_probes_back_off_to_one_a_second(engine: tuple[Engine, str]) -> None:
    state, url = engine
    state.health = 503
    t0 = time.monotonic()
    assert wait_until_ready(lambda c: probe_ready(c, f"{url}/health"), lambda: False, 2.0) == "timeout"
    assert 2.0 <= time.monotonic() - t0 < 2.0 + 0.5
    # Pauses 0.1, 0.15, 0.225, ... up to 1.0: 7 probes in 2 s, where a fixed 0.1 s pause would make 20.
    assert 5 <= len(state.seen) <= 9, len(state.seen)


def test_a_death_ends_the_wait_within_a_slice_and_waiting_is_told(engine: tuple[Engine, str]) -> None:
    state, url = engine
    state.health = 503
    dies_at = time.monotonic() + 1.5  # into the longer pauses (0.5 s, 0.76 s)
    ticks: list[float] = []
    outcome = wait_until_ready(
        lambda c: probe_ready(c, f"{url}/health"),
        lambda: time.monotonic() >= dies_at,
        60,
        waiting=lambda: ticks.append(time.monotonic()),
    )
    assert outcome == "died"
    assert time.monotonic() - dies_at < 0.3  # seen within a 0.1 s slice, not at the next probe
    assert len(ticks) >= 10 and max(b - a for a, b in itertools.pairwise(ticks)) < 0.5
