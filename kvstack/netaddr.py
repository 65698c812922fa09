"""Host addresses and ports: the one loopback test, where a local client reaches a bind address, and
the one port range check."""

from __future__ import annotations

import ipaddress

from kvstack.errors import NetworkTargetError

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})
# A port a server listens on and a client connects to. Port 0 is neither: bind() takes it as "any
# free port" and connect() to it fails.
PORT_MIN, PORT_MAX = 1, 65535
PORT_RANGE = f"{PORT_MIN}-{PORT_MAX}"


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


def is_port(port: int) -> bool:
    """The one port range rule: ``port`` can be listened on and connected to (1-65535)."""
    return PORT_MIN <= port <= PORT_MAX


def parse_port(text: str) -> int | None:
    """The port ``text`` names (decimal digits only), or None when it names none in range."""
    if not text.isascii() or not text.isdigit():
        return None
    port = int(text)
    return port if is_port(port) else None


def check_port(port: int, flag: str = "--port") -> int:
    """``port`` from a flag, or a one-line NetworkTargetError naming the flag and the range (exit 2)."""
    if not is_port(port):
        raise NetworkTargetError(
            f"{flag} {port} is out of range ({PORT_RANGE})", hint=f"choose a free port, e.g. {flag} 8000"
        )
    return port
