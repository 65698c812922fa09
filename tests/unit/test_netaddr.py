"""The one loopback test (kvstack/netaddr.py), used by the renderers, the remote URL and the client."""

from __future__ import annotations

import pytest

from kvstack.clients.client import trusts_env
from kvstack.netaddr import client_host, is_loopback, reaches_local
from kvstack.remote.url import parse_remote_url


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.1", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)
    assert reaches_local(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "example.com", "", "fe80::1"])
def test_other_hosts_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


def test_a_wildcard_bind_is_reached_locally_but_is_not_loopback() -> None:
    # Binding 0.0.0.0 exposes the server; connecting to it reaches this machine's own server.
    assert not is_loopback("0.0.0.0")
    assert reaches_local("0.0.0.0") and reaches_local("::")
    assert not reaches_local("10.0.0.5")


@pytest.mark.parametrize(
    ("bind", "reach"),
    [("0.0.0.0", "127.0.0.1"), ("::", "127.0.0.1"), ("::1", "[::1]"), ("10.1.2.3", "10.1.2.3")],
)
def test_client_host(bind: str, reach: str) -> None:
    assert client_host(bind) == reach


def test_the_three_callers_agree() -> None:
    for host, loop in (("127.0.0.1", True), ("localhost", True), ("10.0.0.7", False)):
        assert parse_remote_url(f"redis://{host}:6379").is_loopback() is loop
        assert trusts_env(f"http://{host}:8000") is not loop
        assert is_loopback(host) is loop
