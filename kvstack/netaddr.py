"""Host addresses: the one loopback test and where a local client reaches a bind address."""

from __future__ import annotations

import ipaddress

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})


def is_loopback(host: str) -> bool:
    """``host`` (a name or an address, IPv6 with or without brackets) is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def reaches_local(host: str) -> bool:
    """A client connecting to ``host`` stays on this machine: loopback, or a wildcard bind address
    (connecting to 0.0.0.0 reaches this machine's own server)."""
    return host in WILDCARD_HOSTS or is_loopback(host)


def client_host(host: str) -> str:
    """Where a local client reaches a server bound to ``host``."""
    if host in WILDCARD_HOSTS:
        return "127.0.0.1"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
