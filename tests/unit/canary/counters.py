"""Counters as the engines and LMCache's cache server expose them, rendered by prometheus_client and
read back with kvstack's own parser (kvstack.clients.metrics.parse_metrics), as a scrape reads them.

Names and labels are the engines' own, spelled here independently of kvstack's constants:
- vLLM 0.32 declares its counters without ``_total`` (the exposition adds it), labelled
  ``model_name`` and ``engine`` (vllm/v1/metrics/loggers.py);
- LMCache 0.5.6's cache server exports OTel counters as ``lmcache_mp_<name>_<unit>_total``
  labelled ``model_name`` and ``cache_salt``; its L2 loads per adapter (``l2_name``: the adapter's
  type). OTel creates a series at its first event, so a load counter may be absent before one;
- SGLang's ``sglang:*`` counters are labelled ``model_name`` and ``tp_rank``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from kvstack.clients.metrics import MetricsSnapshot, parse_metrics

VLLM = {"model_name": "demo", "engine": "0"}
MP = {"model_name": "demo", "cache_salt": ""}
SGLANG = {"model_name": "demo", "tp_rank": "0"}


class Exporter:
    """One process's /metrics: counters that only grow, until the process restarts."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.restart()

    def restart(self) -> None:
        """A new process: every counter starts again from nothing."""
        self.registry = CollectorRegistry()
        self.counters: dict[str, Counter] = {}
        self.histograms: dict[str, Histogram] = {}

    def inc(self, name: str, amount: float = 0.0, /, **labels: str) -> None:
        """``name`` (declared without ``_total``) grows by ``amount``; 0 declares the series."""
        counter = self.counters.get(name)
        if counter is None:
            counter = Counter(name, f"{name} (test)", sorted(labels), registry=self.registry)
            self.counters[name] = counter
        counter.labels(**labels).inc(amount)

    def observe(self, name: str, seconds: float, /, **labels: str) -> None:
        histogram = self.histograms.get(name)
        if histogram is None:
            histogram = Histogram(name, f"{name} (test)", sorted(labels), registry=self.registry)
            self.histograms[name] = histogram
        histogram.labels(**labels).observe(seconds)

    def text(self) -> str:
        return generate_latest(self.registry).decode("utf-8")

    def snapshot(self) -> MetricsSnapshot:
        return parse_metrics(self.text(), self.url)


def scrape(*exporters: Exporter) -> MetricsSnapshot:
    """One scrape of every endpoint, merged (kvstack.clients.metrics.scrape merges its URLs so)."""
    snap = MetricsSnapshot()
    for exporter in exporters:
        snap = snap.merged(exporter.snapshot())
    return snap
