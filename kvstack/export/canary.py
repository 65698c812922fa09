"""The KV canary in an exported deployment, and Prometheus scraping it.

systemd runs ``kvstack serve``, which runs the canary itself (and turns the offload tiers off on wrong
KV); Compose and Helm run the engine directly, so a sidecar runs ``kvstack canary --url ENGINE``
beside it, which can only warn (its metrics, a Prometheus alert): restarting an engine without its
tiers needs ``kvstack serve``. The sidecar's image is built from deploy/canary.Dockerfile.

kvstack's /metrics wants a bearer token. The export never makes one up: the operator puts it where
both the canary and Prometheus read it (a file for systemd, ``KVSTACK_METRICS_TOKEN`` in .env for
Compose, a Secret for Helm), so no token is ever in a rendered file.
"""

from __future__ import annotations

from pathlib import PurePosixPath

import yaml

from kvstack.connectors.engines import engine_spec
from kvstack.export.bundle import ExportFile, ExportOptions
from kvstack.jsonvalue import JsonObject
from kvstack.planning.schema import Plan

JOB = "kvstack-canary"  # the Prometheus job, and the Compose service / Kubernetes name suffix
TOKEN_SECRET = "kvstack-metrics-token"  # the Compose secret, mounted at /run/secrets/<name>
TOKEN_PATH = f"/run/secrets/{TOKEN_SECRET}"
TOKEN_ENV = "KVSTACK_METRICS_TOKEN"  # Compose: the .env variable the secret is made from
TOKEN_KEY = "token"  # Helm: the key of the metrics Secret
DOCKERFILE = "deploy/canary.Dockerfile"
IMAGE_UID = 10001  # the canary image's user (deploy/canary.Dockerfile)
HELM_FILE = "kvstack-canary.yaml"
WARNED = (  # what the wrong-KV alert says was done: nothing
    "the offload tiers still serve (the canary sidecar only warns): find the tier in the canary's log "
    "and the dashboard, then redeploy without it, or serve with kvstack serve (--format systemd), "
    "which falls back"
)
SIDECAR_ACTION = "warn"  # a server kvstack did not start cannot be restarted without its tiers
WARN_ONLY = (
    "the canary sidecar only warns on wrong KV ({how}): it cannot turn the offload tiers off, which "
    "needs kvstack serve (--format systemd, --on-wrong-kv fallback)"
)


def token_file(options: ExportOptions, name: str) -> str:
    """systemd: the metrics token file, beside the unit's EnvironmentFile (/etc/kvstack by default)."""
    return str(PurePosixPath(options.env_file).parent / f"{name}-metrics-token")


def sidecar_args(plan: Plan, engine_url: str, options: ExportOptions) -> list[str]:
    """``kvstack canary`` arguments (after ``kvstack canary``) for a sidecar watching ``engine_url``.

    No --tier: without LMCache's cache server (these deployments run LMCache in the engine, or vLLM's
    or SGLang's own offloading) the engine's counters say a probe came from the offload tiers, not
    from which one, and --tier disk would need the engine's disk directory. The connector and its
    chunk size say how many hit tokens mean a probe was served from them, as ``kvstack serve`` does.
    No API key either: the canary reads VLLM_API_KEY / KVSTACK_API_KEY from its environment.
    """
    return [
        "--url", engine_url,
        "--engine", plan.engine,
        "--offload", plan.transfer.connector,
        "--chunk-tokens", str(plan.cache.chunk_size),
        "--metrics-host", "0.0.0.0",
        "--metrics-port", str(options.metrics_port),
        "--metrics-token-file", TOKEN_PATH,
        "--on-wrong-kv", SIDECAR_ACTION,
    ]  # fmt: skip


def api_key_env(plan: Plan) -> str:
    """The variable the engine's API key is in, which the canary reads too (apikey.ENV_VARS)."""
    return engine_spec(plan.engine).api_key_env or "KVSTACK_API_KEY"


def scrape_job(target: str, credentials_file: str, job: str = JOB) -> JsonObject:
    """A Prometheus scrape job for kvstack's /metrics, its bearer token read from a file."""
    return {
        "job_name": job,
        "metrics_path": "/metrics",
        "authorization": {"type": "Bearer", "credentials_file": credentials_file},
        "static_configs": [{"targets": [target]}],
    }


def alert_rules(job: str, on_wrong_kv: str) -> JsonObject:
    """Prometheus alerting rules: wrong KV found (what was done about it: ``on_wrong_kv``), and the
    canary's endpoint down."""
    return {
        "groups": [
            {
                "name": "kvstack-canary",
                "rules": [
                    {
                        "alert": "KvstackWrongKv",
                        "expr": f'max by (job, instance) (kvstack_canary_wrong_kv{{job="{job}"}}) > 0',
                        "labels": {"severity": "critical"},
                        "annotations": {
                            "summary": "the KV canary found an answer served from cache that recompute "
                            "disagrees with",
                            "description": on_wrong_kv,
                        },
                    },
                    {
                        "alert": "KvstackCanaryDown",
                        "expr": f'up{{job="{job}"}} == 0',
                        "for": "10m",
                        "labels": {"severity": "warning"},
                        "annotations": {
                            "summary": "kvstack's canary /metrics is not answering: nobody checks the "
                            "offload tiers' answers"
                        },
                    },
                ],
            }
        ]
    }


def dump(doc: JsonObject) -> str:
    """YAML without folded lines (a PromQL expression stays on one line)."""
    return yaml.safe_dump(doc, sort_keys=False, width=1000)


def compose_service(plan: Plan, engine_service: str, engine_port: int, options: ExportOptions) -> JsonObject:
    """The Compose sidecar: ``kvstack canary`` against the engine service, its /metrics published on
    loopback (Prometheus in the project reaches it by service name)."""
    key = api_key_env(plan)
    port = options.metrics_port
    return {
        "image": options.canary_image,
        "entrypoint": ["kvstack", "canary"],
        "command": sidecar_args(plan, f"http://{engine_service}:{engine_port}", options),
        "environment": {key: f"${{{key}:-}}"},  # the engine's key, when it has one
        "secrets": [TOKEN_SECRET],
        "ports": [f"127.0.0.1:{port}:{port}"],
        "depends_on": {engine_service: {"condition": "service_healthy"}},
        "restart": "unless-stopped",
    }


def compose_notes(options: ExportOptions, monitored: bool) -> list[str]:
    """``monitored``: the project's Prometheus scrapes the sidecar and alerts on it (vLLM)."""
    notes = [
        f"the {JOB} service checks cached answers against recompute; its image ({options.canary_image}) "
        f"is built from kvstack's {DOCKERFILE} (see its header); set {TOKEN_ENV} in .env first "
        f"(e.g. openssl rand -hex 32): the bearer token of its /metrics on 127.0.0.1:{options.metrics_port}, "
        f"which Compose hands to the canary{' and Prometheus' if monitored else ''} as the secret "
        f"{TOKEN_SECRET}"
    ]
    if monitored:
        notes.append(WARN_ONLY.format(how="its log and metrics, the KvstackWrongKv alert"))
    else:
        notes.append(
            WARN_ONLY.format(how="its log and metrics")
            + f"; no Prometheus runs in this project: scrape 127.0.0.1:{options.metrics_port}/metrics "
            "with the bearer token"
        )
    return notes


def helm_engine_url(name: str) -> str:
    """The engine service the production-stack chart makes for release ``name``'s model ``name``
    (helm/templates/service-vllm.yaml: RELEASE-MODEL-engine-service, on the container port 8000)."""
    return f"http://{name}-{name}-engine-service:8000"


def _labels(name: str) -> dict[str, str]:  # a fresh dict each time: no YAML anchors in the manifest
    return {"app.kubernetes.io/name": JOB, "app.kubernetes.io/instance": name}


def _helm_deployment(plan: Plan, name: str, options: ExportOptions, token_secret: str) -> JsonObject:
    """The sidecar's Deployment: one non-root container, its token mounted from the Secret."""
    container: JsonObject = {
        "name": "canary",
        "image": options.canary_image,
        "command": ["kvstack", "canary"],
        "args": sidecar_args(plan, helm_engine_url(name), options),
        # The chart's API key (servingEngineSpec.vllmApiKey, in its RELEASE-secrets Secret), if set.
        "env": [
            {
                "name": api_key_env(plan),
                "valueFrom": {
                    "secretKeyRef": {"name": f"{name}-secrets", "key": "vllmApiKey", "optional": True}
                },
            }
        ],
        "ports": [{"name": "metrics", "containerPort": options.metrics_port}],
        "volumeMounts": [
            {"name": "metrics-token", "mountPath": TOKEN_PATH, "subPath": TOKEN_KEY, "readOnly": True}
        ],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"{name}-{JOB}", "labels": _labels(name)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": _labels(name)},
            "template": {
                "metadata": {"labels": _labels(name)},
                "spec": {
                    "automountServiceAccountToken": False,  # it reads nothing from the API server
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": IMAGE_UID,
                        "runAsGroup": IMAGE_UID,
                        "fsGroup": IMAGE_UID,  # the token file's group: readable at mode 0440
                    },
                    "containers": [container],
                    # defaultMode 0440 (YAML has it as 288): the pod's group reads it, nobody else
                    "volumes": [
                        {
                            "name": "metrics-token",
                            "secret": {"secretName": token_secret, "defaultMode": 0o440},
                        }
                    ],
                },
            },
        },
    }


def helm_manifest(plan: Plan, name: str, options: ExportOptions) -> ExportFile:
    """The sidecar as its own Deployment (the chart's engine pod takes no extra container), its
    Service, the ServiceMonitor that scrapes it with the token from a Secret, and its alerts."""
    app = f"{name}-{JOB}"

    def labels() -> dict[str, str]:
        return _labels(name)

    token_secret = f"{name}-kvstack-metrics"
    port = options.metrics_port
    deployment = _helm_deployment(plan, name, options, token_secret)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": app, "labels": labels()},
        "spec": {"selector": labels(), "ports": [{"name": "metrics", "port": port, "targetPort": "metrics"}]},
    }
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": app, "labels": labels()},
        "spec": {
            "selector": {"matchLabels": labels()},
            "endpoints": [
                {
                    "port": "metrics",
                    "path": "/metrics",
                    "interval": "30s",
                    "authorization": {
                        "type": "Bearer",
                        "credentials": {"name": token_secret, "key": TOKEN_KEY},
                    },
                }
            ],
        },
    }
    rules = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": app, "labels": labels()},
        # The Prometheus operator names the job after the Service the ServiceMonitor scraped.
        "spec": alert_rules(app, WARNED),
    }
    header = (
        f"# The KV canary beside the {name} release: kvstack canary checks the engine's cached answers\n"
        "# against recompute and only warns (metrics, the KvstackWrongKv alert): turning the offload\n"
        "# tiers off needs kvstack serve (--format systemd).\n"
        f"# 1. the image {options.canary_image}: build it from kvstack's {DOCKERFILE} (see its header)\n"
        "#    and push it where the cluster pulls from (or set its name in this file)\n"
        f"# 2. the bearer token of its /metrics, read by the canary and by Prometheus (never in this file):\n"
        f"#    (umask 077; openssl rand -hex 32 > {TOKEN_SECRET})\n"
        f"#    kubectl create secret generic {token_secret} --from-file={TOKEN_KEY}={TOKEN_SECRET}\n"
        f"# 3. kubectl apply -f {HELM_FILE}\n"
        "# The ServiceMonitor and PrometheusRule need the Prometheus operator (kube-prometheus-stack) and\n"
        "# the labels its Prometheus selects by (kube-prometheus-stack: release: <its release name>).\n"
        f"# The canary watches {helm_engine_url(name)}: change --url if the release has another name.\n"
    )
    docs = [deployment, service, monitor, rules]
    return ExportFile(name=HELM_FILE, content=header + yaml.safe_dump_all(docs, sort_keys=False, width=1000))
