"""Monitoring beside an exported deployment: the Grafana dashboard (export/dashboard.py) as a
ConfigMap for Helm, and Prometheus + Grafana (+ a Redis exporter) services for Compose."""

from __future__ import annotations

import json

import yaml

from kvstack.export import canary
from kvstack.export.bundle import ExportFile
from kvstack.export.dashboard import dashboard
from kvstack.export.deployment import PASSWORD_ENV
from kvstack.planning.schema import Plan
from kvstack.remoteurl import RemoteURL

PROMETHEUS_IMAGE = "prom/prometheus:v2.53.0"
GRAFANA_IMAGE = "grafana/grafana:11.1.0"
REDIS_EXPORTER_IMAGE = "oliver006/redis_exporter:v1.62.0"
REDIS_EXPORTER_PORT = 9121
GRAFANA_PORT = 3000
GRAFANA_PASSWORD_ENV = "GRAFANA_ADMIN_PASSWORD"
CANARY_RULES = "prometheus-alerts.yml"  # the canary's alerting rules, beside prometheus.yml
CANARY_RULES_TARGET = "/etc/prometheus/kvstack-alerts.yml"
# kube-prometheus-stack's Grafana sidecar loads every ConfigMap with this label (its default).
SIDECAR_LABEL = {"grafana_dashboard": "1"}


def dashboard_json(plan: Plan, name: str) -> str:
    return json.dumps(dashboard(plan, name), indent=2) + "\n"


def helm_dashboard(plan: Plan, name: str) -> ExportFile:
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{name}-kvstack-dashboard", "labels": SIDECAR_LABEL},
        "data": {f"kvstack-{name}.json": dashboard_json(plan, name)},
    }
    header = (
        "# Grafana dashboard for this deployment's KV tiers: kubectl apply -f grafana-dashboard.yaml\n"
        "# (a Grafana with the dashboard sidecar, e.g. kube-prometheus-stack's, loads ConfigMaps\n"
        "# labelled grafana_dashboard=1; its Prometheus must scrape the engine's /metrics)\n"
    )
    return ExportFile(name="grafana-dashboard.yaml", content=header + yaml.safe_dump(doc, sort_keys=False))


def compose_monitoring(
    plan: Plan,
    name: str,
    engine_service: str,
    engine_port: int,
    redis_target: str | None,
    url: RemoteURL | None,
    canary_target: str | None = None,
) -> tuple[dict[str, object], dict[str, object], list[ExportFile], list[str]]:
    """(services, configs, files, notes): Prometheus scraping the engine (and the Redis exporter when
    there is a remote tier, the KV canary sidecar at ``canary_target`` with its bearer token, and
    alerting on it), Grafana with the dashboard provisioned, published on 127.0.0.1 only."""
    jobs: list[dict[str, object]] = [
        {"job_name": "engine", "static_configs": [{"targets": [f"{engine_service}:{engine_port}"]}]}
    ]
    if canary_target is not None:
        jobs.append(canary.scrape_job(canary_target, canary.TOKEN_PATH))
    services: dict[str, object] = {}
    if redis_target is not None:
        jobs.append(
            {"job_name": "redis", "static_configs": [{"targets": [f"redis-exporter:{REDIS_EXPORTER_PORT}"]}]}
        )
        environment = {"REDIS_ADDR": redis_target}
        if url is not None and url.password is not None:
            environment["REDIS_PASSWORD"] = f"${{{PASSWORD_ENV}}}"
        services["redis-exporter"] = {
            "image": REDIS_EXPORTER_IMAGE,
            "environment": environment,
            "restart": "unless-stopped",
        }
    prometheus_cfg: dict[str, object] = {"global": {"scrape_interval": "10s"}}
    prometheus_configs = [{"source": "prometheus-config", "target": "/etc/prometheus/prometheus.yml"}]
    prometheus: dict[str, object] = {"image": PROMETHEUS_IMAGE, "configs": prometheus_configs}
    if canary_target is not None:
        prometheus_cfg["rule_files"] = [CANARY_RULES_TARGET]
        prometheus_configs.append({"source": "kvstack-alerts", "target": CANARY_RULES_TARGET})
        prometheus["secrets"] = [canary.TOKEN_SECRET]  # its authorization.credentials_file
    prometheus_cfg["scrape_configs"] = jobs
    prometheus["restart"] = "unless-stopped"
    services["prometheus"] = prometheus
    datasource = {
        "apiVersion": 1,
        "datasources": [
            {"name": "Prometheus", "type": "prometheus", "uid": "prometheus", "url": "http://prometheus:9090"}
        ],
    }
    provider = {
        "apiVersion": 1,
        "providers": [
            {"name": "kvstack", "type": "file", "options": {"path": "/var/lib/grafana/dashboards"}}
        ],
    }
    services["grafana"] = {
        "image": GRAFANA_IMAGE,
        # No default admin password: `docker compose up` refuses to start until it is set.
        "environment": {
            "GF_SECURITY_ADMIN_PASSWORD": f"${{{GRAFANA_PASSWORD_ENV}:?set {GRAFANA_PASSWORD_ENV} in .env}}",
            "GF_AUTH_ANONYMOUS_ENABLED": "false",
        },
        "ports": [f"127.0.0.1:{GRAFANA_PORT}:3000"],
        "configs": [
            {"source": "grafana-datasource", "target": "/etc/grafana/provisioning/datasources/kvstack.yaml"},
            {"source": "grafana-dashboards", "target": "/etc/grafana/provisioning/dashboards/kvstack.yaml"},
            {"source": "kvstack-dashboard", "target": "/var/lib/grafana/dashboards/kvstack.json"},
        ],
        "depends_on": {"prometheus": {"condition": "service_started"}},
        "restart": "unless-stopped",
    }
    configs: dict[str, object] = {
        "prometheus-config": {"file": "./prometheus.yml"},
        "grafana-datasource": {"file": "./grafana-datasource.yaml"},
        "grafana-dashboards": {"file": "./grafana-dashboards.yaml"},
        "kvstack-dashboard": {"file": "./dashboard.json"},
    }
    if canary_target is not None:
        configs["kvstack-alerts"] = {"file": f"./{CANARY_RULES}"}
    files = [
        ExportFile(name="prometheus.yml", content=yaml.safe_dump(prometheus_cfg, sort_keys=False)),
        ExportFile(name="grafana-datasource.yaml", content=yaml.safe_dump(datasource, sort_keys=False)),
        ExportFile(name="grafana-dashboards.yaml", content=yaml.safe_dump(provider, sort_keys=False)),
        ExportFile(name="dashboard.json", content=dashboard_json(plan, name)),
    ]
    if canary_target is not None:
        files.append(
            ExportFile(name=CANARY_RULES, content=canary.dump(canary.alert_rules(canary.JOB, canary.WARNED)))
        )
    scraped = ["the engine"]
    if redis_target:
        scraped.append("the Redis exporter")
    if canary_target is not None:
        scraped.append("the KV canary (alerting on wrong KV: prometheus-alerts.yml)")
    said = scraped[0] if len(scraped) == 1 else ", ".join(scraped[:-1]) + " and " + scraped[-1]
    notes = [
        f"Grafana (dashboard 'kvstack: {name}') on 127.0.0.1:{GRAFANA_PORT}: set {GRAFANA_PASSWORD_ENV} in "
        f".env first; Prometheus scrapes {said}"
    ]
    return services, configs, files, notes
