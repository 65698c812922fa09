"""llm-d: values for its modelservice chart, and the scheduler's plugin config with the tiers' capacities.

Read in llm-d-incubation/llm-d-modelservice 3051935 (chart v0.4.12: values.yaml, values.schema.json,
the one the tests check against), llm-d/llm-d's guides/tiered-prefix-cache (the vLLM arguments of each
tier, PYTHONHASHSEED pinned in every pod) and llm-d/llm-d-router ebab687 (the EndpointPickerConfig
types; apix/config/v1alpha1, and pkg/epp/framework/plugins: approx-prefix-cache-producer's
``autoTune``/``blockSizeTokens``/``lruCapacityPerServer``, prefix-cache-scorer's
``prefixMatchInfoProducerName``). Facts this module relies on:
- ``decode.containers[]`` with ``modelCommand: vllmServe`` runs ``vllm serve <model>`` with the port,
  ``--tensor-parallel-size`` and ``--served-model-name`` from the chart, then the container's args;
- vLLM reports no CPU-tier blocks, so the scheduler cannot size its CPU-tier index itself: the
  guide sets ``autoTune: false`` and ``lruCapacityPerServer`` (blocks of ``blockSizeTokens`` per pod)
  by hand; here it comes from the plan's CPU tier; the GPU tier's producer tunes itself;
- the router decodes plugin parameters strictly (unknown ones are refused).
"""

from __future__ import annotations

import yaml

from kvstack.connectors import spec_of
from kvstack.export.bundle import Bundle, ExportFile, ExportOptions
from kvstack.export.deployment import (
    deployment_name,
    gib_ceil,
    lmcache_in_engine,
    local_model,
    pod_resources,
    remote,
    require_engine,
    shm_volume,
    unsupervised_notes,
    vllm_kv_args,
)
from kvstack.export.monitoring import helm_dashboard
from kvstack.export.secrets import api_key_note, pod_env, pod_redis_env
from kvstack.planning.schema import Plan

CHART = "llm-d-modelservice 0.4.12"
VALUES_FILE = "llm-d-modelservice-values.yaml"
EPP_FILE = "epp-plugins.yaml"
EPP_API_VERSION = "llm-d.ai/v1alpha1"
BLOCK_SIZE_TOKENS = 64  # the producer's index unit: it clamps anything smaller to 64 at request time
DISK_DIR = "/mnt/kvstack-disk"


def cpu_index_blocks(plan: Plan) -> int | None:
    """lruCapacityPerServer for the CPU tier's producer: the tier's tokens per pod in index blocks."""
    cpu = plan.tier("cpu")
    return None if cpu is None else max(1, cpu.tokens // BLOCK_SIZE_TOKENS)


def epp_config(plan: Plan) -> dict[str, object]:
    """The EndpointPickerConfig: GPU-prefix and (with a CPU tier) CPU-prefix scorers, each fed by a
    producer; the CPU one sized from the plan."""
    plugins: list[dict[str, object]] = [
        {"type": "queue-scorer"},
        {"type": "kv-cache-utilization-scorer"},
        {"type": "approx-prefix-cache-producer", "name": "gpu-prefix-cache-producer"},
        {
            "type": "prefix-cache-scorer",
            "name": "gpu-prefix-cache-scorer",
            "parameters": {"prefixMatchInfoProducerName": "gpu-prefix-cache-producer"},
        },
    ]
    profile = [{"pluginRef": "queue-scorer"}, {"pluginRef": "kv-cache-utilization-scorer"}]
    profile.append({"pluginRef": "gpu-prefix-cache-scorer"})
    blocks = cpu_index_blocks(plan)
    if blocks is not None and plan.offloads:
        plugins += [
            {
                "type": "approx-prefix-cache-producer",
                "name": "cpu-prefix-cache-producer",
                "parameters": {
                    "autoTune": False,
                    "blockSizeTokens": BLOCK_SIZE_TOKENS,
                    "lruCapacityPerServer": blocks,
                },
            },
            {
                "type": "prefix-cache-scorer",
                "name": "cpu-prefix-cache-scorer",
                "parameters": {"prefixMatchInfoProducerName": "cpu-prefix-cache-producer"},
            },
        ]
        profile.append({"pluginRef": "cpu-prefix-cache-scorer"})
    return {
        "apiVersion": EPP_API_VERSION,
        "kind": "EndpointPickerConfig",
        "plugins": plugins,
        "schedulingProfiles": [{"name": "default", "plugins": profile}],
    }


def _container(
    plan: Plan, options: ExportOptions, name: str, notes: list[str], files: list[ExportFile]
) -> tuple[dict[str, object], list[dict[str, object]]]:
    disk = plan.tier("disk")
    args = [
        "--max-model-len", str(plan.model.max_model_len),
        "--gpu-memory-utilization", str(plan.cache.gpu_memory_utilization),
        "--enable-prefix-caching",
    ]  # fmt: skip
    env = pod_env(name)
    shm, shm_mount = shm_volume(plan)
    mounts: list[dict[str, object]] = [shm_mount]
    volumes: list[dict[str, object]] = [shm]
    if disk is not None and plan.offloads:
        mounts.append({"name": "kvstack-disk", "mountPath": DISK_DIR})
        volumes.append({"name": "kvstack-disk", "emptyDir": {"sizeLimit": f"{gib_ceil(disk.size_bytes)}Gi"}})
        notes.append(
            "the disk tier is an emptyDir on the node's disk: put the pods on NVMe nodes, or replace it "
            "with a ReadWriteMany PVC to share it between pods (as llm-d's tiered-prefix-cache guide does)"
        )
    image = options.image
    if spec_of(plan.transfer.connector).lmcache_mode:  # either mode of LMCache: its tiers in-process
        image, connector_args, lmcache = lmcache_in_engine(
            plan, options, DISK_DIR if disk is not None else None, "llm-d", notes
        )
        args += ["--kv-cache-dtype", plan.cache.kv_cache_dtype, *connector_args]
        env += lmcache
        url = remote(options, plan)
        if url is not None:
            env += pod_redis_env(url, name, files, notes)
    else:
        args += vllm_kv_args(plan, DISK_DIR if disk is not None else None)
    container: dict[str, object] = {
        "name": "vllm",
        "modelCommand": "vllmServe",
        "args": args,
        "env": env,
        "resources": pod_resources(plan),
        "volumeMounts": mounts,
    }
    if image:
        container["image"] = image
    return container, volumes


def render_llm_d(plan: Plan, options: ExportOptions) -> Bundle:
    require_engine(plan, "llm-d's modelservice", "llm-d", "use --offload native or lmcache")
    name = deployment_name(plan, options.name)
    notes: list[str] = [api_key_note(name)]
    files: list[ExportFile] = []
    uri = f"hf://{plan.model.path}"
    if local_model(plan):
        uri = f"pvc://models/{plan.model.geometry.name}"
        notes.append(f"the model is a local directory: copy it onto a PVC named models; written as {uri}")
    container, volumes = _container(plan, options, name, notes, files)
    tp = plan.parallel.tensor_parallel_size
    decode: dict[str, object] = {
        "create": True,
        "replicas": 1,
        "parallelism": {"tensor": tp},
        "containers": [container],
        "volumes": volumes,
    }
    values = {
        "modelArtifacts": {"name": plan.model.geometry.name, "uri": uri},
        "accelerator": {"type": "nvidia" if plan.platform == "cuda" else "cpu"},
        "routing": {"proxy": {"enabled": False}},
        "decode": decode,
        "prefill": {"create": False},
    }
    header = (
        f"# llm-d modelservice values ({CHART}) written by kvstack export for {plan.model.geometry.name}\n"
        f"# engine {plan.engine}, connector {plan.transfer.connector}, "
        f"KV dtype {plan.cache.kv_cache_dtype}, TP {tp}\n"
        f"# helm install {name} llm-d-modelservice/llm-d-modelservice -f {VALUES_FILE}\n"
    )
    main = ExportFile(name=VALUES_FILE, content=header + yaml.safe_dump(values, sort_keys=False))
    blocks = cpu_index_blocks(plan)
    epp_header = (
        "# The llm-d router's (EPP) plugins: pass as router.epp.pluginsCustomConfig in its chart's values.\n"
        + (
            f"# cpu-prefix-cache-producer: the plan's CPU tier, {blocks:,} blocks of {BLOCK_SIZE_TOKENS} "
            "tokens per pod (vLLM reports no CPU-tier blocks, so the router cannot size it itself)\n"
            if blocks is not None and plan.offloads
            else ""
        )
    )
    epp = ExportFile(name=EPP_FILE, content=epp_header + yaml.safe_dump(epp_config(plan), sort_keys=False))
    files += [epp, helm_dashboard(plan, name)]
    # Of the connectors llm-d deploys, only vLLM's native offloading moves KV with no remote tier.
    if plan.tier("remote") is not None and plan.offloads and not spec_of(plan.transfer.connector).remote:
        notes.append("vLLM's native offloading has no remote tier: the plan's remote tier is not exported")
    notes += unsupervised_notes(plan, "llm-d")
    return Bundle(format="llm-d", files=[main, *files], notes=notes)
