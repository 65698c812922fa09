"""check_http_url: an http(s) URL a client can connect to, or one line naming the flag (exit 2)."""

from __future__ import annotations

import pytest

from kvstack.clients.client import check_http_url
from kvstack.errors import NetworkTargetError


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8000", "https://engine.example:1", "http://[::1]:65535", "http://engine"]
)
def test_a_connectable_url_passes(url: str) -> None:
    check_http_url(url, "--url")  # no port: the scheme's (80, 443)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:0", "http://127.0.0.1:65536", "http://h:port", "http://h:-1"]
)
def test_a_port_no_client_can_connect_to_is_refused(url: str) -> None:
    # Port 0 passed before: it is "any port" to bind(), and connect() to it always fails.
    with pytest.raises(NetworkTargetError) as err:
        check_http_url(url, "--lmcache")
    assert err.value.exit_code == 2
    assert err.value.message == f"--lmcache {url!r} has an invalid port"
    assert err.value.hint == "ports are 1-65535"


@pytest.mark.parametrize("url", ["ftp://h:21", "127.0.0.1:8000", "http://:8000"])
def test_not_an_http_url(url: str) -> None:
    with pytest.raises(NetworkTargetError, match="is not an http"):
        check_http_url(url, "--url")


def test_the_password_of_a_refused_url_is_not_shown() -> None:
    with pytest.raises(NetworkTargetError) as err:
        check_http_url("http://u:hunter22@127.0.0.1:0", "--url")
    assert "hunter22" not in err.value.message
