"""Preflight against real sockets on loopback (a closed port, a plain TCP listener); the figures
from a real Redis are in tests/integration/test_redis_preflight.py."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from kvstack.errors import NetworkTargetError
from kvstack.remote.preflight import preflight, require_reachable


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def tcp_listener() -> Iterator[int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                conn.close()
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield int(srv.getsockname()[1])
    stop.set()
    t.join(2)
    srv.close()


def test_closed_port_is_unreachable_data_not_an_exception() -> None:
    port = closed_port()
    got = preflight(f"redis://alice:hunter22@127.0.0.1:{port}/0", timeout_s=1.0)
    assert got.reachable is False
    assert got.error is not None and got.error.startswith("cannot connect")
    assert "hunter22" not in got.model_dump_json()


def test_require_reachable_raises_with_a_hint_and_no_password() -> None:
    port = closed_port()
    with pytest.raises(NetworkTargetError) as err:
        require_reachable(f"redis://alice:hunter22@127.0.0.1:{port}", timeout_s=1.0)
    assert err.value.exit_code == 2
    assert err.value.hint is not None and f"-p {port}" in err.value.hint
    assert "hunter22" not in f"{err.value.message} {err.value.hint}"


def test_malformed_url_raises_before_any_connection() -> None:
    with pytest.raises(NetworkTargetError):
        preflight("redis://127.0.0.1")


def test_lm_url_reports_reachability_and_connect_latency(tcp_listener: int) -> None:
    got = preflight(f"lm://127.0.0.1:{tcp_listener}", timeout_s=1.0)
    assert got.reachable is True and got.latency_s is not None and got.latency_s > 0
    assert got.server_version is None  # lm:// speaks LMCache's protocol, not Redis's
    down = preflight(f"lm://127.0.0.1:{closed_port()}", timeout_s=1.0)
    assert down.reachable is False


def test_a_non_redis_listener_is_not_reachable_as_redis(tcp_listener: int) -> None:
    got = preflight(f"redis://127.0.0.1:{tcp_listener}", timeout_s=1.0)
    assert got.reachable is False and got.error
