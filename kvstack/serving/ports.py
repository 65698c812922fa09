"""Which port each process of a multi-replica launch binds, from ``--port`` alone.

Without ``--router`` (P = --port, N = --replicas):
    P .. P+N-1              engine i on P+i (what clients use: any of them)
    P+N+2i, P+N+2i+1        replica i's LMCache MP server and its HTTP/metrics port
With ``--router``:
    P                       vllm-router (what clients use)
    P+1 .. P+N              engine i on P+1+i
    P+N+1                   the router's Prometheus metrics
    P+N+2+2i, P+N+3+2i      replica i's LMCache MP server and its HTTP/metrics port

One replica without a router keeps the single-engine layout (engine P, LMCache MP P+1 and
P+2: ServeOptions' defaults). Helper ports are reserved whether or not the connector starts
a helper, so the layout never depends on the connector. No range overlaps another.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvstack.errors import NetworkTargetError
from kvstack.netaddr import PORT_MAX, PORT_RANGE, check_port, is_port

HELPER_PORTS_PER_REPLICA = 2  # LMCache MP: the ZMQ server and its HTTP API (/healthcheck, /metrics)


@dataclass(frozen=True)
class PortLayout:
    base: int
    engine_ports: tuple[int, ...]
    helper_ports: tuple[tuple[int, int], ...]  # per replica: (LMCache MP server, its HTTP port)
    router_port: int | None = None
    router_metrics_port: int | None = None

    @property
    def replicas(self) -> int:
        return len(self.engine_ports)

    def all_ports(self) -> list[int]:
        out = [p for p in (self.router_port, self.router_metrics_port) if p is not None]
        out += self.engine_ports
        out += [p for pair in self.helper_ports for p in pair]
        return sorted(out)

    def to_dict(self) -> dict[str, object]:
        return {
            "router": self.router_port,
            "router_metrics": self.router_metrics_port,
            "engines": list(self.engine_ports),
            "lmcache_mp": [list(pair) for pair in self.helper_ports],
        }


def port_layout(port: int, replicas: int, router: bool) -> PortLayout:
    """The layout above; a port past 65535 is a NetworkTargetError naming the highest --port that fits."""
    check_port(port)  # the one check of --port's range: every port below is derived from it
    if replicas < 1:
        raise NetworkTargetError(f"--replicas must be at least 1, not {replicas}", hint="e.g. --replicas 2")
    first_engine = port + 1 if router else port
    engines = tuple(first_engine + i for i in range(replicas))
    metrics = first_engine + replicas if router else None
    helpers_from = first_engine + replicas + (1 if router else 0)
    helpers = tuple(
        (helpers_from + HELPER_PORTS_PER_REPLICA * i, helpers_from + HELPER_PORTS_PER_REPLICA * i + 1)
        for i in range(replicas)
    )
    layout = PortLayout(port, engines, helpers, port if router else None, metrics)
    highest = max(layout.all_ports())
    if not (is_port(port) and is_port(highest)):
        span = highest - port
        raise NetworkTargetError(
            f"--port {port} with --replicas {replicas}{' and --router' if router else ''} needs ports "
            f"{port}-{highest}, beyond {PORT_RANGE}",
            hint=f"choose a --port between 1 and {PORT_MAX - span}",
        )
    return layout
