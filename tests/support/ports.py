"""Free ports for servers the tests start, chosen below the kernel's ephemeral range.

An engine takes a minute to start and opens many outgoing sockets meanwhile (ZMQ, its own
clients); their ephemeral ports can land on a port kvstack checked free earlier. Ports below
``ip_local_port_range`` are never handed out that way, just as a user's --port 8000 is not.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOW = 20000


def ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_block(size: int = 1) -> int:
    """A base port with ``size`` consecutive free ports, all below the ephemeral range."""
    high = ephemeral_start() - size
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(LOW, high)
        if all(_free(p) for p in range(base, base + size)):
            return base
    raise AssertionError(f"no block of {size} free ports between {LOW} and {high}")
