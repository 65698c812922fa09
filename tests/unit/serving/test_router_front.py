"""The router's front (serving/router_front.py): the validator the router asks about each bearer,
and the proxy behind kvstack's guard, against real HTTP servers in threads.
tests/integration/test_replicas_run.py runs the whole of it in front of the real vllm-router."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from kvstack.names import CONTROL_HEADER
from kvstack.serving.router_front import Proxy, free_loopback_port, main, validator

TOKEN = "run-token-" + "f" * 32


@pytest.fixture
def check() -> Iterator[str]:
    server = validator(TOKEN)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/validate"
    server.shutdown()
    server.server_close()


def test_the_validator_says_yes_to_the_run_token_alone(check: str) -> None:
    def asked(headers: dict[str, str]) -> int:
        return httpx.get(check, headers=headers, trust_env=False).status_code

    assert asked({"Authorization": f"Bearer {TOKEN}"}) == 200
    for wrong in (f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", TOKEN, f"Basic {TOKEN}", "Bearer"):
        assert asked({"Authorization": wrong}) == 401, wrong
    assert asked({}) == 401


class Upstream(ThreadingHTTPServer):
    """The router as the proxy sees it: records each request, answers in three SSE chunks."""

    daemon_threads = True

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                outer.seen.append(
                    {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
                )
                self.send_response(201)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("X-Router", "yes")
                self.end_headers()
                for i in range(3):
                    data = f"data: {i}\n\n".encode()
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                    time.sleep(0.05)
                self.wfile.write(b"0\r\n\r\n")

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def through(proxy: Proxy, method: str, path: str, headers: dict[str, str], body: bytes = b"") -> list[Any]:
    """The ASGI messages ``proxy`` sends for one request (body in two parts, as a server may pass it)."""
    sent: list[dict[str, Any]] = []
    parts = [body[: len(body) // 2], body[len(body) // 2 :]]

    async def receive() -> dict[str, Any]:
        chunk = parts.pop(0) if parts else b""
        return {"type": "http.request", "body": chunk, "more_body": bool(parts)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"url=http%3A%2F%2Fx",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }

    async def run() -> None:
        try:
            await proxy(scope, receive, send)
        finally:
            if proxy._session is not None:
                await proxy._session.close()
                proxy._session = None

    asyncio.run(run())
    return sent


def test_what_the_guard_lets_through_reaches_the_router_with_the_token_as_the_bearer(
    upstream: Upstream,
) -> None:
    proxy = Proxy(f"http://127.0.0.1:{upstream.server_address[1]}", TOKEN)
    sent = through(
        proxy,
        "POST",
        "/v1/completions",
        {
            "Authorization": "Bearer sk-the-users-key",
            CONTROL_HEADER: TOKEN,
            "Host": "front.example:8000",
            "Connection": "keep-alive",
            "Content-Type": "application/json",
            "X-Request-Id": "r-7",
        },
        b'{"prompt": "hello"}',
    )
    (req,) = upstream.seen
    assert req["method"] == "POST" and req["path"] == "/v1/completions?url=http%3A%2F%2Fx"
    assert req["body"] == b'{"prompt": "hello"}'
    got = {k.lower(): v for k, v in req["headers"].items()}
    assert got["authorization"] == f"Bearer {TOKEN}"  # the router's check; the engines take it too
    assert got["x-request-id"] == "r-7" and got["content-type"] == "application/json"
    assert CONTROL_HEADER.lower() not in got and got["host"].startswith("127.0.0.1:")
    assert "accept-encoding" not in got and "user-agent" not in got  # nothing the client did not send
    start, *chunks = sent
    assert start["type"] == "http.response.start" and start["status"] == 201
    headers = dict(start["headers"])
    assert headers[b"x-router"] == b"yes" and b"transfer-encoding" not in headers
    data = [m["body"] for m in chunks if m["body"]]
    assert data == [b"data: 0\n\n", b"data: 1\n\n", b"data: 2\n\n"]  # streamed, event by event
    assert chunks[-1] == {"type": "http.response.body", "body": b""}


def test_the_path_and_query_reach_the_router_as_the_client_spelled_them(upstream: Upstream) -> None:
    proxy = Proxy(f"http://127.0.0.1:{upstream.server_address[1]}", TOKEN)
    through(proxy, "DELETE", "/workers/http%3A%2F%2F127.0.0.1%3A9", {})
    assert upstream.seen[0]["path"] == "/workers/http%3A%2F%2F127.0.0.1%3A9?url=http%3A%2F%2Fx"


def test_a_router_that_is_not_up_is_a_502_not_a_crash() -> None:
    proxy = Proxy(f"http://127.0.0.1:{free_loopback_port()}", TOKEN)
    start, body = through(proxy, "GET", "/health", {})
    assert start["status"] == 502 and b"vllm-router does not answer" in body["body"]


def test_the_front_needs_the_routers_arguments_after_a_separator() -> None:
    with pytest.raises(SystemExit, match="usage: --host H --port P -- VLLM-ROUTER ARGS"):
        main(["--host", "127.0.0.1", "--port", "8000"])
