"""The LMCache operator: an ``LMCacheEngine`` (lmcache.lmcache.ai/v1alpha1) and the vLLM Deployment
its webhook wires to it.

Read in LMCache/LMCache's operator/ (03b0525: config/crd/bases/lmcache.lmcache.ai_lmcacheengines.yaml,
the schema the tests check against; internal/resources and the webhook; config/samples). Facts this
module relies on:
- the operator runs LMCache's cache server (MP mode) as a DaemonSet, one per selected node, with its
  L1 in host memory (``l1.sizeGB``) and one L2 adapter (``l2Backend``: ``resp`` for Redis, whose
  password comes from a Secret with key ``password``; or ``raw`` with an adapter type and its config);
- a vLLM pod labelled ``lmcache.ai/lmcache-inject: "true"`` and annotated
  ``lmcache.ai/lmcache-engine: <name>`` gets ``--kv-transfer-config`` (LMCacheMPConnector to the
  node's server) appended to its args by the webhook, which also sets PYTHONHASHSEED=0 when absent
  and shares /dev/shm; the container must keep the image's entrypoint (args only).
So the plan's connector is LMCache MP; an in-process LMCache plan is carried as MP with its sizes.
"""

from __future__ import annotations

import yaml

from kvstack.connectors import spec_of
from kvstack.errors import UnsupportedError
from kvstack.export.bundle import Bundle, ExportFile, ExportOptions
from kvstack.export.deployment import (
    deployment_name,
    engine_image,
    exports_engine,
    gib_floor,
    lmcache_in,
    local_model,
    pod_resources,
    remote,
    require_connector,
    unsupervised_notes,
)
from kvstack.export.monitoring import helm_dashboard
from kvstack.export.secrets import HASH_SEED, api_key_note, pod_env
from kvstack.planning.schema import Plan

API_VERSION = "lmcache.lmcache.ai/v1alpha1"
ENGINE_FILE = "lmcache-engine.yaml"
VLLM_FILE = "vllm-deployment.yaml"
SECRET_FILE = "redis-auth-secret.yaml"
DISK_HOST_DIR = "/var/lib/kvstack/kv"  # on each node: the disk tier (raw fs_native adapter)
DISK_MOUNT = "/kv"
LMCACHE_HASH_ALGORITHM = "sha256_cbor"  # kvstack's (engines/versions.py); the operator defaults to blake3
VLLM_PORT = 8000


def _l2(
    plan: Plan, options: ExportOptions, name: str, notes: list[str], files: list[ExportFile]
) -> dict[str, object] | None:
    """The one L2 adapter: the remote tier when there is one (shared), else the disk tier."""
    url = remote(options, plan)
    disk = plan.tier("disk")
    if url is not None:
        if disk is not None:
            notes.append(
                "the LMCache operator runs one L2 adapter per engine: the remote tier is kept (it is "
                "shared), the plan's disk tier is not carried"
            )
        resp: dict[str, object] = {"host": url.host, "port": url.port}
        tier = plan.tier("remote")
        if tier is not None:
            resp["maxCapacityGB"] = gib_floor(tier.size_bytes)
        if url.password:
            secret = f"{name}-redis-auth"
            resp["authSecretRef"] = {"name": secret}
            data = {"password": url.password, **({"username": url.username} if url.username else {})}
            doc = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret}, "type": "Opaque"}
            doc["stringData"] = data
            header = (
                f"# The Redis tier's credentials for the LMCache operator: kubectl apply -f {SECRET_FILE}\n"
            )
            content = header + yaml.safe_dump(doc, sort_keys=False)
            files.append(ExportFile(name=SECRET_FILE, content=content, mode=0o600, secret=True))
            notes.append(f"create the Redis credentials Secret first: kubectl apply -f {SECRET_FILE}")
        if url.scheme != "redis" or url.is_loopback():
            notes.append(
                "the operator's Redis adapter needs a plain redis:// service the cluster reaches, not "
                + url.redacted()
            )
        return {"resp": resp}
    if disk is not None:
        notes.append(
            f"the disk tier is a hostPath ({DISK_HOST_DIR}) on every node the engine runs on: put it on NVMe"
        )
        config = {"base_path": DISK_MOUNT, "max_capacity_gb": gib_floor(disk.size_bytes)}
        return {"raw": {"type": "fs_native", "config": config}}
    return None


def _engine(
    plan: Plan, options: ExportOptions, name: str, notes: list[str], files: list[ExportFile]
) -> dict[str, object]:
    cpu = plan.tier("cpu")
    spec: dict[str, object] = {
        "gpuVendor": "nvidia",
        "server": {"chunkSize": plan.cache.chunk_size, "hashAlgorithm": LMCACHE_HASH_ALGORITHM},
        "l1": {"sizeGB": max(1, gib_floor(cpu.size_bytes)) if cpu is not None else 1},
        "env": [{"name": "PYTHONHASHSEED", "value": HASH_SEED}],
        "prometheus": {"enabled": True, "serviceMonitor": {"enabled": True}},
        "logLevel": "INFO",
    }
    if plan.platform != "cuda":  # the operator's defaults select GPU nodes and NVIDIA's runtime class
        spec["runtimeClassName"] = ""
        spec["nodeSelector"] = {}
    l2 = _l2(plan, options, name, notes, files)
    if l2 is not None:
        spec["l2Backend"] = l2
    if "raw" in (l2 or {}):
        spec["volumes"] = [
            {"name": "kv-disk", "hostPath": {"path": DISK_HOST_DIR, "type": "DirectoryOrCreate"}}
        ]
        spec["volumeMounts"] = [{"name": "kv-disk", "mountPath": DISK_MOUNT}]
    return {
        "apiVersion": API_VERSION,
        "kind": "LMCacheEngine",
        "metadata": {"name": f"{name}-lmcache"},
        "spec": spec,
    }


def _vllm(plan: Plan, options: ExportOptions, name: str, notes: list[str]) -> list[dict[str, object]]:
    tp = plan.parallel.tensor_parallel_size
    # The webhook wires LMCache's server (MP mode) into the engine's pods: the engine's image for it.
    repo, tag, image_notes = engine_image(plan, options, lmcache_in("mp"))
    notes += image_notes
    model = plan.model.path
    if local_model(plan):
        model = f"/models/{plan.model.geometry.name}"
        notes.append(f"the model is a local directory: mount it into the vLLM pod at {model}")
    args = [
        "--model", model,
        "--served-model-name", plan.model.geometry.name,
        "--port", str(VLLM_PORT),
        "--tensor-parallel-size", str(tp),
        "--max-model-len", str(plan.model.max_model_len),
        "--gpu-memory-utilization", str(plan.cache.gpu_memory_utilization),
        "--kv-cache-dtype", plan.cache.kv_cache_dtype,
        "--enable-prefix-caching",
    ]  # fmt: skip
    labels = {"app.kubernetes.io/name": name}
    container = {
        "name": "vllm",
        "image": f"{repo}:{tag}",
        "args": args,  # the image's entrypoint is vllm serve: the webhook injects into args only
        "env": pod_env(name),
        "ports": [{"name": "http", "containerPort": VLLM_PORT}],
        "resources": pod_resources(plan),
    }
    deployment: dict[str, object] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {
                    "labels": {**labels, "lmcache.ai/lmcache-inject": "true"},
                    "annotations": {"lmcache.ai/lmcache-engine": f"{name}-lmcache"},
                },
                "spec": {"containers": [container]},
            },
        },
    }
    service: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": labels, "ports": [{"name": "http", "port": VLLM_PORT, "targetPort": "http"}]},
    }
    return [deployment, service]


def render_lmcache_operator(plan: Plan, options: ExportOptions) -> Bundle:
    if not exports_engine(plan, "lmcache-operator"):
        raise UnsupportedError(
            f"the LMCache operator wires LMCache's server into vLLM pods; this plan uses {plan.engine}",
            hint="use --engine vllm, or --format compose / systemd for SGLang",
        )
    require_connector(plan, "lmcache-operator", "use --offload lmcache-mp")
    name = deployment_name(plan, options.name)
    notes: list[str] = [api_key_note(name)]
    files: list[ExportFile] = []
    if plan.platform != "cuda":
        notes.append(
            "a CPU plan: the engine runs on any node (nodeSelector {}, no GPU runtime class), and vLLM's "
            "default image is a CUDA build: give a CPU build of vLLM with --image"
        )
    if spec_of(plan.transfer.connector).lmcache_mode == "in-process":
        notes.append(
            "the operator runs LMCache's server beside the engine (MP mode): the plan's in-process LMCache "
            "tiers run there with the same sizes"
        )
    engine = _engine(plan, options, name, notes, files)
    cpu = plan.tier("cpu")
    if cpu is None:
        notes.append("the plan has no CPU tier, but the operator needs one: l1.sizeGB is its minimum, 1")
    header = (
        f"# LMCache operator engine written by kvstack export for {plan.model.geometry.name}\n"
        "# (LMCache's cache server on each node)\n"
        f"# connector lmcache-mp, chunk {plan.cache.chunk_size}; kubectl apply -f {ENGINE_FILE}\n"
    )
    main = ExportFile(name=ENGINE_FILE, content=header + yaml.safe_dump(engine, sort_keys=False))
    vllm_header = (
        "# vLLM, wired to the LMCache engine by the operator's webhook (label lmcache.ai/lmcache-inject)\n"
        f"# kubectl apply -f {VLLM_FILE}\n"
    )
    vllm = ExportFile(
        name=VLLM_FILE,
        content=vllm_header + yaml.safe_dump_all(_vllm(plan, options, name, notes), sort_keys=False),
    )
    files = [vllm, *files, helm_dashboard(plan, name)]
    notes += unsupervised_notes(plan, "the operator")
    return Bundle(format="lmcache-operator", files=[main, *files], notes=notes)
