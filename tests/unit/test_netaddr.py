"""The one loopback test and the one port range rule (kvstack/netaddr.py), used by the renderers, the
remote URL, the clients and every port flag."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kvstack.clients.client import check_http_url, trusts_env
from kvstack.engines.launch_basics import derived_port
from kvstack.errors import InputError, NetworkTargetError
from kvstack.netaddr import check_port, client_host, is_loopback, is_port, parse_port, reaches_local
from kvstack.remoteurl import parse_remote_url
from kvstack.serving.ports import port_layout


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


# --- the one port range rule: 1-65535 (0 is "any port" to bind() and no port to connect()) ---


@pytest.mark.parametrize(("text", "port"), [("1", 1), ("6379", 6379), ("65535", 65535)])
def test_a_port_in_range_parses(text: str, port: int) -> None:
    assert parse_port(text) == port and is_port(port) and check_port(port) == port


@pytest.mark.parametrize("text", ["0", "65536", "100000", "-1", "", "port", " 80", "\u00b2", "8O"])
def test_anything_else_is_no_port(text: str) -> None:
    assert parse_port(text) is None


@pytest.mark.parametrize("port", [0, -1, 65536, 100000])
def test_a_flag_out_of_range_is_one_line_naming_flag_and_range(port: int) -> None:
    with pytest.raises(NetworkTargetError) as err:
        check_port(port, "--lmcache-port")
    assert isinstance(err.value, InputError) and err.value.exit_code == 2
    assert err.value.message == f"--lmcache-port {port} is out of range (1-65535)"
    assert err.value.hint is not None and "--lmcache-port 8000" in err.value.hint


def _accepts(check: Callable[[int], object], port: int) -> bool:
    try:
        check(port)
    except InputError:
        return False
    return True


# Every place that takes a port, each given the port in its own form.
PORT_READERS: dict[str, Callable[[int], object]] = {
    "--port (serve, export)": check_port,
    "--url, --lmcache (bench, validate, top)": lambda p: check_http_url(f"http://127.0.0.1:{p}", "--url"),
    "--remote": lambda p: parse_remote_url(f"redis://cache:{p}"),
    "replica port layout": lambda p: port_layout(p, 1, router=False),
    "derived helper port": lambda p: derived_port(p, 0, "LMCache server"),
}


@pytest.mark.parametrize("reader", list(PORT_READERS))
def test_every_reader_of_a_port_keeps_the_one_range(reader: str) -> None:
    check = PORT_READERS[reader]
    assert not _accepts(check, 0)  # check_http_url took port 0 before it used netaddr's rule
    assert not _accepts(check, 65536)
    assert _accepts(check, 1)
