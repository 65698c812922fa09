"""kvstack's own Prometheus metrics: what the canary has seen, on an endpoint only its owner reads.

Served by the ``kvstack serve`` process (a thread), on loopback unless told otherwise, at
``/metrics`` in Prometheus' text format (prometheus_client's own exposition). Every request must
carry ``Authorization: Bearer <token>``: by default the run's control token (0600 in the 0700 run
dir, so no other local user can read it), or the contents of ``--metrics-token-file`` (what a
Prometheus scrape job's ``authorization.credentials_file`` points to). Anything else gets 401.

Series:
- ``kvstack_canary_checks_total{served_from, verdict}``: probes asked again and judged;
- ``kvstack_canary_last_disagreement_nats``: the last check's typical disagreement with recompute;
- ``kvstack_canary_gate_nats``: the gate it was judged by;
- ``kvstack_canary_last_pass_timestamp_seconds`` and ``kvstack_canary_seconds_since_last_pass``;
- ``kvstack_canary_prefill_share``: the canary's share of the engine's computed prompt tokens;
- ``kvstack_canary_wrong_kv``: 1 once a check failed;
- ``kvstack_offload_enabled``: 0 after the fallback turned the offload tiers off.

With several engines (``kvstack serve --replicas N``) every canary series is one per engine,
labelled ``replica`` (its host:port); ``kvstack_offload_enabled`` stays one (the fallback turns
every engine's tiers off).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from kvstack.canary.state import CanaryState, ReplicaState

METRICS_PATH = "/metrics"
PREFIX = "kvstack_canary"


class CanaryCollector(Collector):
    """Reads the canary's state at each scrape (``read`` returns a copy taken under its lock)."""

    def __init__(self, read: Callable[[], CanaryState]) -> None:
        self.read = read

    def collect(self) -> Iterator[Any]:
        state = self.read()
        # (label values, what that engine's canary saw): the run's whole state for one engine
        views: list[tuple[list[str], CanaryState | ReplicaState]] = (
            [([name], r) for name, r in sorted(state.replicas.items())] if state.replicas else [([], state)]
        )
        labels = ["replica"] if state.replicas else []
        checks = CounterMetricFamily(
            f"{PREFIX}_checks",
            "Canary probes asked again and judged against a recompute",
            labels=[*labels, "served_from", "verdict"],
        )
        for values, view in views:
            for where, by in sorted(view.checks.items()):
                for verdict, n in sorted(by.items()):
                    checks.add_metric([*values, where, verdict], n)
        yield checks
        gauges = {
            "last_disagreement_nats": "The last check's typical disagreement with recompute (nats)",
            "gate_nats": "The gate checks are judged by (nats)",
            "last_pass_timestamp_seconds": "When a check last passed",
            "seconds_since_last_pass": "Seconds since a check last passed",
            "prefill_share": "The canary's share of the prompt tokens the engine computed since it started",
            "wrong_kv": "1 once a check found wrong KV",
        }
        families = {k: GaugeMetricFamily(f"{PREFIX}_{k}", text, labels=labels) for k, text in gauges.items()}
        now = time.time()
        for values, view in views:
            last = view.last
            if last is not None and last.typical is not None:
                families["last_disagreement_nats"].add_metric(values, last.typical)
            if view.gate is not None:
                families["gate_nats"].add_metric(values, view.gate)
            if view.last_pass_at is not None:
                families["last_pass_timestamp_seconds"].add_metric(values, view.last_pass_at)
                families["seconds_since_last_pass"].add_metric(values, max(0.0, now - view.last_pass_at))
            if view.share is not None:
                families["prefill_share"].add_metric(values, view.share)
            families["wrong_kv"].add_metric(values, 1.0 if view.count("fail") else 0.0)
        for family in families.values():
            if family.samples:
                yield family
        yield GaugeMetricFamily(
            "kvstack_offload_enabled",
            "1 while the offload tiers serve; 0 after the fallback turned them off",
            value=0.0 if state.fallback is not None and state.fallback.tiers_off else 1.0,
        )


def registry_for(read: Callable[[], CanaryState]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CanaryCollector(read))
    return registry


def render(read: Callable[[], CanaryState]) -> bytes:
    return generate_latest(registry_for(read))


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


class MetricsServer:
    """The endpoint: a ThreadingHTTPServer in a daemon thread; ``close()`` stops it."""

    def __init__(self, host: str, port: int, token: str, read: Callable[[], CanaryState]) -> None:
        registry = registry_for(read)
        want = _digest(token)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                scheme, _, given = self.headers.get("Authorization", "").partition(" ")
                if scheme.lower() != "bearer" or not hmac.compare_digest(_digest(given.strip()), want):
                    self._send(401, b"kvstack metrics need the run's bearer token\n", "text/plain")
                    return
                if self.path.split("?", 1)[0] != METRICS_PATH:
                    self._send(404, b"not found\n", "text/plain")
                    return
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                if code == 401:
                    self.send_header("WWW-Authenticate", "Bearer")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="kvstack-metrics", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{name}]" if ":" in name else name
        return f"http://{shown}:{port}{METRICS_PATH}"

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.httpd.shutdown()
            self.httpd.server_close()
