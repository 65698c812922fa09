"""Values for the vLLM production-stack Helm chart (vllm-project/production-stack, helm/).

Key names checked against that repository at a6c01db (Aug 2026): helm/values.yaml and
helm/values.schema.json (servingEngineSpec.modelSpec[]: name, repository, tag, modelURL,
replicaCount, requestCPU, requestMemory, requestGPU, pvcStorage, shmSize, enableLoRA, env,
vllmConfig{enablePrefixCaching, maxModelLen, dtype, tensorParallelSize, gpuMemoryUtilization,
extraArgs}, lmcacheConfig{enabled, cpuOffloadingBufferSize, logLevel}) and
helm/templates/deployment-vllm-multi.yaml, which also reads lmcacheConfig.diskOffloadingBufferSize
(-> LMCACHE_MAX_LOCAL_DISK_SIZE). Facts of that template this module relies on:
- it passes ``--no-enable-prefix-caching`` unless vllmConfig.enablePrefixCaching is true;
- it enables the CPU tier only if ``int cpuOffloadingBufferSize > 0`` (so sizes are whole GiB);
- it sets no LMCache disk path and takes a remote URL only from its own cacheserverSpec (lm://),
  so the disk path and an external Redis go in modelSpec.env (LMCACHE_* variables, lmcache v1/config.py);
  a URL that holds a credential (``user:pw@``, ``?password=``) goes whole into a Secret that the
  variable references (env[].valueFrom.secretKeyRef), never into values.yaml or a container's args;
- it mounts the PVC at /data and /dev/shm (sized by shmSize) when tensorParallelSize is set;
- its engine pod takes no container of ours (its only sidecar is its LoRA one), so the KV canary
  runs in a Deployment of its own (kvstack-canary.yaml, export/canary.py) against the chart's
  RELEASE-MODEL-engine-service (helm/templates/service-vllm.yaml).
"""

from __future__ import annotations

import yaml

from kvstack.connectors import spec_of
from kvstack.errors import UnsupportedError
from kvstack.export import canary
from kvstack.export.bundle import Bundle, ExportFile, ExportOptions
from kvstack.export.deployment import (
    LMCACHE_HASH,
    canary_runs,
    deployment_name,
    engine_image,
    exports_engine,
    gib_ceil,
    gib_floor,
    host_memory_bytes,
    local_model,
    remote,
    require_connector,
    shm_bytes,
    vllm_kv_args,
)
from kvstack.export.monitoring import helm_dashboard
from kvstack.export.secrets import HASH_SEED, pod_redis_env
from kvstack.planning.schema import Plan

PVC_MOUNT = "/data"
DISK_DIR = f"{PVC_MOUNT}/kvstack-kv"
MODELS_DIR = f"{PVC_MOUNT}/models"
# The PVC holds the weights (HF_HOME=/data in the chart) and the disk tier: leave this much spare.
PVC_MARGIN = 1.10


def render_helm(plan: Plan, options: ExportOptions) -> Bundle:
    if not exports_engine(plan, "helm"):
        raise UnsupportedError(
            "the vLLM production-stack chart runs vLLM only, this plan uses " + plan.engine,
            hint="use --engine vllm, or --format compose / systemd for SGLang",
        )
    require_connector(
        plan,
        "helm",
        "use --offload lmcache or native (the chart runs no LMCache MP server), or --format systemd",
    )
    url = remote(options, plan)
    name = deployment_name(plan, options.name)
    repo, tag, notes = engine_image(plan, options)
    tp = plan.parallel.tensor_parallel_size
    cpu, disk = plan.tier("cpu"), plan.tier("disk")

    model_url = plan.model.path
    if local_model(plan):
        model_url = f"{MODELS_DIR}/{plan.model.path.rstrip('/').rsplit('/', 1)[-1]}"
        notes.append(
            f"the model is a local directory: copy it onto the PVC at {model_url} (mounted at /data)"
        )

    pvc_bytes = (plan.model.weight_bytes + (disk.size_bytes if disk else 0)) * PVC_MARGIN
    env: list[dict[str, object]] = [
        {"name": "PYTHONHASHSEED", "value": HASH_SEED},
        {"name": "LMCACHE_CHUNK_SIZE", "value": str(plan.cache.chunk_size)},
        {"name": "LMCACHE_PRE_CACHING_HASH_ALGORITHM", "value": LMCACHE_HASH},
    ]
    vllm_config: dict[str, object] = {
        "enablePrefixCaching": True,
        "maxModelLen": plan.model.max_model_len,
        "dtype": plan.model.geometry.dtype,
        "tensorParallelSize": tp,
        "gpuMemoryUtilization": plan.cache.gpu_memory_utilization,
        # The chart adds the LMCacheConnectorV1 --kv-transfer-config itself when lmcacheConfig.enabled.
        "extraArgs": vllm_kv_args(plan, DISK_DIR if disk else None, with_lmcache_connector=False),
    }
    spec: dict[str, object] = {
        "name": name,
        "repository": repo,
        "tag": tag,
        "modelURL": model_url,
        "replicaCount": 1,
        # vLLM runs an API server plus one worker process per GPU, each busy on the host side.
        "requestCPU": 2 + 4 * tp,
        "requestMemory": f"{gib_ceil(host_memory_bytes(plan))}Gi",
        "requestGPU": tp,
        "pvcStorage": f"{gib_ceil(pvc_bytes)}Gi",
        "shmSize": f"{gib_ceil(shm_bytes(plan))}Gi",
        "enableLoRA": False,
        "vllmConfig": vllm_config,
    }
    files: list[ExportFile] = []
    if spec_of(plan.transfer.connector).lmcache_mode == "in-process":
        lm: dict[str, object] = {"enabled": True, "logLevel": "INFO"}
        if cpu is not None:
            if gib_floor(cpu.size_bytes_per_rank) < 1:
                notes.append("the CPU tier is under 1 GiB per rank: the chart turns it off below 1")
            lm["cpuOffloadingBufferSize"] = gib_floor(cpu.size_bytes_per_rank)
        if disk is not None:
            lm["diskOffloadingBufferSize"] = gib_floor(disk.size_bytes_per_rank)
            env.append({"name": "LMCACHE_LOCAL_DISK", "value": f"file://{DISK_DIR}/"})
            notes.append("the disk tier lives on the model PVC: give it an NVMe-backed storageClass")
        spec["lmcacheConfig"] = lm
        if url is not None:
            env += pod_redis_env(url, name, files, notes)
    else:
        spec["lmcacheConfig"] = {"enabled": False}
    spec["env"] = env

    values = {"servingEngineSpec": {"modelSpec": [spec]}}
    header = (
        f"# vLLM production-stack values written by kvstack export for {plan.model.geometry.name}\n"
        f"# engine {plan.engine}, connector {plan.transfer.connector}, "
        f"KV dtype {plan.cache.kv_cache_dtype}, TP {tp}\n"
        "# helm repo add vllm https://vllm-project.github.io/production-stack\n"
        f"# helm install {name} vllm/vllm-stack -f values.yaml\n"
    )
    main = ExportFile(
        name="values.yaml", content=header + yaml.safe_dump(values, sort_keys=False), mode=0o644
    )
    files.append(helm_dashboard(plan, name))
    notes.append(
        "grafana-dashboard.yaml: the KV-tier dashboard as a ConfigMap for Grafana's dashboard sidecar"
    )
    if canary_runs(plan):
        files.append(canary.helm_manifest(plan, name, options))
        notes += [
            f"{canary.HELM_FILE}: the KV canary beside the engine (its Deployment, Service, ServiceMonitor "
            f"and alerts); build its image ({options.canary_image}) from kvstack's {canary.DOCKERFILE} and "
            f"create the {name}-kvstack-metrics Secret (its /metrics bearer token) first: see its header",
            canary.WARN_ONLY.format(how="its log and metrics, the KvstackWrongKv alert"),
        ]
    return Bundle(format="helm", files=[main, *files], notes=notes)
