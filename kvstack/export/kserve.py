"""A KServe ``LLMInferenceService`` (serving.kserve.io/v1alpha2) from a plan.

Read in kserve/kserve v0.20.0 (1fb7810: config/crd/full/llmisvc/serving.kserve.io_llminferenceservices
.yaml, pkg/apis/serving/v1alpha2/llm_inference_service_types.go, pkg/controller/v1alpha2/llmisvc/
workload_kvcache.go); the schema the tests check against is that CRD's (tests/unit/export/data/
schemas/kserve-llminferenceservice.json). Facts this module relies on:
- the workload fields are inline in ``spec`` (``spec.kvCacheOffloading``, ``spec.template``): the
  docs' and samples' ``spec.workload.kvCacheOffloading`` is no field of the CRD;
- ``kvCacheOffloading`` drives vLLM's OffloadingConnector (TieringOffloadingSpec): ``cpu`` is
  ``cpu_bytes_to_use`` (all ranks), each ``secondary`` file-system tier is mounted at
  /mnt/kv-cache-<i>, and an ``emptyDir`` tier's size is also requested as ephemeral storage; the
  controller adds its ``--kv-transfer-config`` only when the container's args carry none;
- the vLLM container is the one named ``main``: its ``args`` follow ``vllm serve /mnt/models``.

So a native plan goes into ``kvCacheOffloading``; an LMCache plan runs LMCache in-process in the
engine (its connector in the args, its settings as LMCACHE_* variables, the image that ships it),
since KServe runs no LMCache server; what KServe cannot carry is said in the notes.
"""

from __future__ import annotations

import yaml

from kvstack.connectors import spec_of
from kvstack.export.bundle import Bundle, ExportFile, ExportOptions
from kvstack.export.deployment import (
    deployment_name,
    gib_floor,
    lmcache_in_engine,
    local_model,
    pod_resources,
    remote,
    require_engine,
    shm_volume,
    unsupervised_notes,
)
from kvstack.export.monitoring import helm_dashboard
from kvstack.export.secrets import api_key_note, pod_env, pod_redis_env
from kvstack.planning.schema import Plan

API_VERSION = "serving.kserve.io/v1alpha2"
KSERVE_VERSION = "0.20.0"
MAIN = "main"  # the container KServe's template runs vllm serve in
LMCACHE_DISK_DIR = "/mnt/kvstack-disk"
FILE = "llminferenceservice.yaml"


def _quantity(n_bytes: int) -> str:
    return f"{gib_floor(n_bytes)}Gi" if n_bytes >= 1 << 30 else f"{max(1, n_bytes >> 20)}Mi"


def _model(plan: Plan, notes: list[str]) -> dict[str, object]:
    if local_model(plan):
        uri = f"pvc://models/{plan.model.geometry.name}"
        notes.append(
            f"the model is a local directory: copy it onto a PVC named models "
            f"(at /{plan.model.geometry.name}) or set spec.model.uri to where it is stored "
            f"(s3://, gs://, hf://); written as {uri}"
        )
    else:
        uri = f"hf://{plan.model.path}"
    return {"uri": uri, "name": plan.model.geometry.name}


def _offloading(plan: Plan, notes: list[str]) -> dict[str, object] | None:
    """spec.kvCacheOffloading for a native plan (vLLM's OffloadingConnector)."""
    cpu, disk = plan.tier("cpu"), plan.tier("disk")
    if cpu is None:
        return None
    out: dict[str, object] = {"cpu": _quantity(cpu.size_bytes), "evictionPolicy": "lru"}
    if disk is not None:
        out["secondary"] = [{"fileSystem": {"emptyDir": {"size": _quantity(disk.size_bytes)}}}]
        notes.append(
            "the disk tier is an emptyDir on the node's disk (KServe also requests its size as ephemeral "
            "storage): put the pods on nodes whose ephemeral storage is NVMe, or replace it with "
            "fileSystem.pvc (an NVMe-backed storageClass)"
        )
    return out


def render_kserve(plan: Plan, options: ExportOptions) -> Bundle:
    require_engine(plan, "KServe's LLMInferenceService", "kserve", "use --offload native or lmcache")
    url = remote(options, plan)
    name = deployment_name(plan, options.name)
    notes: list[str] = []
    tp = plan.parallel.tensor_parallel_size
    args = [
        "--max-model-len", str(plan.model.max_model_len),
        "--gpu-memory-utilization", str(plan.cache.gpu_memory_utilization),
        "--kv-cache-dtype", plan.cache.kv_cache_dtype,
        "--enable-prefix-caching",
    ]  # fmt: skip
    env = pod_env(name)
    notes.append(api_key_note(name))
    container: dict[str, object] = {"name": MAIN}
    shm, shm_mount = shm_volume(plan)
    mounts: list[dict[str, object]] = [shm_mount]
    volumes: list[dict[str, object]] = [shm]
    files: list[ExportFile] = []
    spec: dict[str, object] = {"model": _model(plan, notes), "replicas": 1}
    if tp > 1:
        spec["parallelism"] = {"tensor": tp}
    connector = spec_of(plan.transfer.connector)
    if connector.builtin_flags:  # vLLM's own offloading, which kvCacheOffloading drives
        offloading = _offloading(plan, notes)
        if offloading is not None:
            spec["kvCacheOffloading"] = offloading
    elif connector.lmcache_mode:  # either mode of LMCache: its tiers in-process, in the container
        disk = plan.tier("disk")
        image, connector_args, lmcache = lmcache_in_engine(
            plan, options, LMCACHE_DISK_DIR if disk is not None else None, "KServe", notes
        )
        container["image"] = image
        args += connector_args
        env += lmcache
        if disk is not None:
            volumes.append({"name": "kvstack-disk", "emptyDir": {"sizeLimit": _quantity(disk.size_bytes)}})
            mounts.append({"name": "kvstack-disk", "mountPath": LMCACHE_DISK_DIR})
        if url is not None:
            env += pod_redis_env(url, name, files, notes)
        notes.append(
            "LMCache is configured in the container (KServe's kvCacheOffloading drives only vLLM's "
            "OffloadingConnector, and the controller adds none when the args carry a --kv-transfer-config)"
        )
    if options.image and "image" not in container:
        container["image"] = options.image
    container.update(
        {
            "args": args,
            "env": env,
            "resources": pod_resources(plan),
            "volumeMounts": mounts,
        }
    )
    spec["template"] = {"containers": [container], "volumes": volumes}
    spec["router"] = {"scheduler": {}, "route": {}, "gateway": {}}
    doc = {"apiVersion": API_VERSION, "kind": "LLMInferenceService", "metadata": {"name": name}, "spec": spec}
    header = (
        f"# KServe {KSERVE_VERSION} LLMInferenceService written by kvstack export for "
        f"{plan.model.geometry.name}\n"
        f"# engine {plan.engine}, connector {plan.transfer.connector}, "
        f"KV dtype {plan.cache.kv_cache_dtype}, TP {tp}\n"
        f"# kubectl apply -f {FILE}\n"
    )
    main = ExportFile(name=FILE, content=header + yaml.safe_dump(doc, sort_keys=False))
    files.append(helm_dashboard(plan, name))
    notes.append(
        "grafana-dashboard.yaml: the KV-tier dashboard as a ConfigMap for Grafana's dashboard sidecar"
    )
    notes += unsupervised_notes(plan, "KServe")
    return Bundle(format="kserve", files=[main, *files], notes=notes)
