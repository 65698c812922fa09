"""The KV canary in every export: systemd's `kvstack serve` runs it with a pinned /metrics port and
token file, Compose and Helm run a `kvstack canary` sidecar, and each deployment's Prometheus scrapes
it with a bearer token that no exported file holds (export/canary.py)."""

from __future__ import annotations

import configparser
import re
import shlex
from typing import Any

import pytest
import typer
import yaml

from kvstack import __version__
from kvstack.export import ExportOptions, export_plan
from kvstack.export.bundle import Bundle, ExportFile
from kvstack.export.canary import IMAGE_UID, TOKEN_PATH
from kvstack.planning.schema import Plan
from tests.support.deps import ROOT
from tests.unit.export.plans import make_plan

NO_TIERS = {"connector": "none", "cpu_gib_per_rank": None, "disk_gib_per_rank": None}


def file_of(bundle: Bundle, name: str) -> ExportFile:
    (f,) = [f for f in bundle.files if f.name == name]
    return f


def names(bundle: Bundle) -> list[str]:
    return [f.name for f in bundle.files]


def flags(argv: list[str]) -> dict[str, str]:
    return {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")}


def canary_command() -> Any:
    """The real ``kvstack canary`` command (typer's own click)."""
    from kvstack.cli.app import app

    command = getattr(typer.main.get_command(app), "commands", {}).get("canary")
    if command is None:
        pytest.skip("this checkout has no `kvstack canary` command yet")
    return command


def parsed(argv: list[str]) -> dict[str, Any]:
    """``kvstack canary`` parsing ``argv`` as the real command does (no server is contacted)."""
    assert argv[:2] == ["kvstack", "canary"], argv
    with canary_command().make_context("canary", argv[2:]) as ctx:
        params: dict[str, Any] = dict(ctx.params)
    return params


def unit_words(bundle: Bundle) -> list[str]:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(bundle.main.content)
    return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(unit["Service"]["ExecStart"])]


# --- systemd: kvstack serve runs the canary ------------------------------------------------------


def test_systemd_pins_the_metrics_port_and_token_file_that_prometheus_reads() -> None:
    options = ExportOptions(name="llama", env_file="/etc/kvstack/kvstack.env", metrics_port=9555)
    bundle = export_plan("systemd", make_plan(), options)
    assert names(bundle) == [
        "kvstack-llama.service",
        "kvstack.env",
        "prometheus-kvstack.yml",
        "prometheus-kvstack-rules.yml",
    ]
    token = "/etc/kvstack/llama-metrics-token"  # beside the EnvironmentFile
    pairs = flags(unit_words(bundle))
    assert pairs["--metrics-port"] == "9555" and pairs["--metrics-token-file"] == token
    assert "--no-canary" not in unit_words(bundle)  # kvstack serve runs it by default
    assert token in bundle.main.content.split("[Unit]")[0]  # the header says where the token goes
    (job,) = yaml.safe_load(file_of(bundle, "prometheus-kvstack.yml").content)["scrape_configs"]
    assert job["static_configs"] == [{"targets": ["127.0.0.1:9555"]}]
    assert job["authorization"] == {"type": "Bearer", "credentials_file": token}
    assert job["metrics_path"] == "/metrics"
    rules = yaml.safe_load(file_of(bundle, "prometheus-kvstack-rules.yml").content)
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    assert any("kvstack_canary_wrong_kv" in e and job["job_name"] in e for e in exprs)
    assert any(e.startswith("up{") and job["job_name"] in e for e in exprs)
    assert any(token in n and "openssl rand" in n for n in bundle.notes)
    # Nothing secret is generated: the token file is the operator's, written by no export file.
    assert not any(f.secret for f in bundle.files)
    assert all(f.mode == 0o644 for f in bundle.files if f.name.startswith("prometheus-"))


def test_systemd_has_no_canary_where_no_offload_tier_serves() -> None:
    bundle = export_plan("systemd", make_plan(**NO_TIERS), ExportOptions())  # type: ignore[arg-type]
    assert names(bundle)[2:] == []
    assert "--metrics-port" not in unit_words(bundle) and "canary" not in bundle.main.content.lower()


# --- Compose: a sidecar, scraped by the project's Prometheus -------------------------------------


def compose_project(plan: Plan, options: ExportOptions | None = None) -> tuple[dict[str, Any], Bundle]:
    bundle = export_plan("compose", plan, options or ExportOptions())
    return yaml.safe_load(bundle.main.content), bundle


@pytest.mark.parametrize(
    ("plan", "engine_url", "key"),
    [
        (make_plan(), "http://vllm:8000", "VLLM_API_KEY"),
        (make_plan(connector="native"), "http://vllm:8000", "VLLM_API_KEY"),
        (make_plan(engine="sglang", connector="hicache"), "http://sglang:30000", "KVSTACK_API_KEY"),
    ],
    ids=["lmcache", "native", "sglang-hicache"],
)
def test_compose_runs_a_canary_sidecar_against_the_engine(plan: Plan, engine_url: str, key: str) -> None:
    doc, bundle = compose_project(plan)
    sidecar = doc["services"]["kvstack-canary"]
    assert sidecar["image"] == f"kvstack:{__version__}"
    argv = [*sidecar["entrypoint"], *sidecar["command"]]
    params = parsed(argv)
    assert params["url"] == engine_url and params["engine"] == plan.engine
    assert params["offload"] == plan.transfer.connector and params["chunk_tokens"] == plan.cache.chunk_size
    assert params["on_wrong_kv"] == "warn"  # it cannot fall back: kvstack did not start the engine
    assert params["metrics_host"] == "0.0.0.0" and params["metrics_port"] == 9464
    assert str(params["metrics_token_file"]) == TOKEN_PATH
    # The token: a Compose secret made from .env's KVSTACK_METRICS_TOKEN, never a value in the YAML.
    assert sidecar["secrets"] == ["kvstack-metrics-token"]
    assert doc["secrets"]["kvstack-metrics-token"] == {"environment": "KVSTACK_METRICS_TOKEN"}
    assert sidecar["environment"] == {key: f"${{{key}:-}}"}  # the engine's key, read by the canary
    assert sidecar["depends_on"] == {plan.engine: {"condition": "service_healthy"}}
    assert sidecar["ports"] == ["127.0.0.1:9464:9464"]  # loopback only
    assert any("deploy/canary.Dockerfile" in n for n in bundle.notes)
    assert any("only warns" in n and "kvstack serve" in n for n in bundle.notes)


def test_compose_prometheus_scrapes_the_sidecar_with_the_token_and_alerts_on_wrong_kv() -> None:
    doc, bundle = compose_project(make_plan(), ExportOptions(metrics_port=9470))
    files = {f.name: f.content for f in bundle.files}
    config = yaml.safe_load(files["prometheus.yml"])
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "kvstack-canary"]
    assert job["static_configs"] == [{"targets": ["kvstack-canary:9470"]}]
    assert job["authorization"] == {"type": "Bearer", "credentials_file": TOKEN_PATH}
    prometheus = doc["services"]["prometheus"]
    assert prometheus["secrets"] == ["kvstack-metrics-token"]  # mounted at credentials_file
    # Its rules file is mounted where prometheus.yml's rule_files names it.
    (rules_target,) = config["rule_files"]
    (mount,) = [c for c in prometheus["configs"] if c["target"] == rules_target]
    rules = yaml.safe_load(files[doc["configs"][mount["source"]]["file"].removeprefix("./")])
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert 'kvstack_canary_wrong_kv{job="kvstack-canary"}' in alerts["KvstackWrongKv"]["expr"]
    assert "still serve" in alerts["KvstackWrongKv"]["annotations"]["description"]
    assert alerts["KvstackCanaryDown"]["expr"] == 'up{job="kvstack-canary"} == 0'
    assert doc["services"]["kvstack-canary"]["command"][-6:-4] == ["--metrics-port", "9470"]
    assert "KVSTACK_METRICS_TOKEN" not in files["prometheus.yml"]  # a file path, not the value


def test_compose_sglang_has_no_prometheus_and_says_where_to_scrape() -> None:
    doc, bundle = compose_project(make_plan(engine="sglang", connector="hicache"))
    assert "prometheus" not in doc["services"] and "kvstack-canary" in doc["services"]
    assert any("no Prometheus runs in this project" in n and "127.0.0.1:9464" in n for n in bundle.notes)


def test_compose_has_no_sidecar_where_no_offload_tier_serves() -> None:
    doc, bundle = compose_project(make_plan(**NO_TIERS))  # type: ignore[arg-type]
    assert "kvstack-canary" not in doc["services"] and "secrets" not in doc
    jobs = [
        j["job_name"] for j in yaml.safe_load(file_of(bundle, "prometheus.yml").content)["scrape_configs"]
    ]
    assert jobs == ["engine"] and "prometheus-alerts.yml" not in names(bundle)


# --- Helm: a Deployment beside the chart, a ServiceMonitor with the token from a Secret ------------


def helm_docs(bundle: Bundle) -> dict[str, dict[str, Any]]:
    docs = list(yaml.safe_load_all(file_of(bundle, "kvstack-canary.yaml").content))
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs)
    return by_kind


def test_helm_runs_the_canary_beside_the_charts_engine_service() -> None:
    bundle = export_plan("helm", make_plan(), ExportOptions(name="llama", canary_image="reg:5000/kvstack:1"))
    docs = helm_docs(bundle)
    assert set(docs) == {"Deployment", "Service", "ServiceMonitor", "PrometheusRule"}
    for d in docs.values():
        assert d["metadata"]["name"] == "llama-kvstack-canary" and isinstance(d["apiVersion"], str)
    pod = docs["Deployment"]["spec"]["template"]
    assert docs["Deployment"]["spec"]["selector"]["matchLabels"] == pod["metadata"]["labels"]
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "reg:5000/kvstack:1"
    params = parsed([*container["command"], *container["args"]])
    # The chart's service for release "llama", model "llama" (helm install llama ...: values.yaml's header).
    values = yaml.safe_load(bundle.main.content)
    model = values["servingEngineSpec"]["modelSpec"][0]["name"]
    assert f"helm install {model} " in bundle.main.content
    assert params["url"] == f"http://{model}-{model}-engine-service:8000"
    assert params["on_wrong_kv"] == "warn" and params["metrics_port"] == 9464
    assert str(params["metrics_token_file"]) == TOKEN_PATH
    # The token file: the Secret's key, mounted read-only where --metrics-token-file reads it.
    (mount,) = container["volumeMounts"]
    assert (mount["mountPath"], mount["readOnly"]) == (TOKEN_PATH, True)
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    secret_name = volume["secret"]["secretName"]
    assert mount["subPath"] == "token" and volume["secret"]["defaultMode"] == 0o440
    assert (
        pod["spec"]["securityContext"]["runAsUser"] == IMAGE_UID == pod["spec"]["securityContext"]["fsGroup"]
    )
    assert pod["spec"]["automountServiceAccountToken"] is False
    (env,) = container["env"]
    ref = env["valueFrom"]["secretKeyRef"]
    assert env["name"] == "VLLM_API_KEY" and ref == {
        "name": "llama-secrets",
        "key": "vllmApiKey",
        "optional": True,
    }
    # The Service selects the pod; the ServiceMonitor selects the Service and sends the same Secret.
    service, monitor = docs["Service"], docs["ServiceMonitor"]
    assert service["spec"]["selector"] == pod["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"] == service["metadata"]["labels"]
    (port,) = service["spec"]["ports"]
    assert (
        port["targetPort"] == container["ports"][0]["name"] and container["ports"][0]["containerPort"] == 9464
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == port["name"] and endpoint["path"] == "/metrics"
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": secret_name, "key": "token"},
    }
    # Alerts on the job the operator names after the Service.
    exprs = [r["expr"] for g in docs["PrometheusRule"]["spec"]["groups"] for r in g["rules"]]
    assert any(f'kvstack_canary_wrong_kv{{job="{service["metadata"]["name"]}"}}' in e for e in exprs)
    # No Secret in the bundle for the token: the operator creates it (the header says how).
    content = file_of(bundle, "kvstack-canary.yaml").content
    assert not any(d["kind"] == "Secret" for d in yaml.safe_load_all(content))
    assert f"kubectl create secret generic {secret_name} --from-file=token=" in content
    assert any("only warns" in n for n in bundle.notes)


def test_helm_manifests_have_the_fields_kubernetes_requires() -> None:
    """By hand (no Kubernetes schema here): names are DNS-1123, containers and ports are complete."""
    docs = helm_docs(export_plan("helm", make_plan(remote_gib=8), ExportOptions(remote_url="redis://c:6379")))
    for d in docs.values():
        assert set(d) == {"apiVersion", "kind", "metadata", "spec"}
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", d["metadata"]["name"])
        assert len(d["metadata"]["name"]) <= 63
    (container,) = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert all(isinstance(a, str) for a in [*container["command"], *container["args"]])
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", container["name"])
    for port in [*container["ports"], *docs["Service"]["spec"]["ports"]]:
        assert len(port["name"]) <= 15 and 0 < port.get("containerPort", port.get("port")) < 65536


def test_helm_has_no_canary_where_no_offload_tier_serves() -> None:
    bundle = export_plan("helm", make_plan(**NO_TIERS), ExportOptions())  # type: ignore[arg-type]
    assert "kvstack-canary.yaml" not in names(bundle)


# --- the sidecar's image ---------------------------------------------------------------------------


def test_the_canary_image_is_built_from_the_dockerfile_the_exports_name() -> None:
    dockerfile = (ROOT / "deploy" / "canary.Dockerfile").read_text(encoding="utf-8")
    lines = [x.strip() for x in dockerfile.splitlines() if x.strip() and not x.startswith("#")]
    assert lines[0] == "FROM python:3.12-slim"
    assert any(x.startswith("RUN pip install") and "kvstack-*.whl" in x for x in lines)
    assert f"USER {IMAGE_UID}:{IMAGE_UID}" in lines  # the uid Helm's securityContext runs it as
    assert f"-t {ExportOptions().canary_image} " in dockerfile  # the tag the exports run by default
    assert ExportOptions().canary_image == f"kvstack:{__version__}"
