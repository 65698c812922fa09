"""Options that several commands share (the plan's inputs), declared once so that their names,
help texts and defaults cannot drift apart between `plan`, `serve`, `bench` and `export`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Model = Annotated[
    str,
    typer.Option(
        "--model", "-m", help="Local model directory (with config.json) or a catalog name / HF repo id."
    ),
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
CacheDir = Annotated[
    Path | None, typer.Option("--cache-dir", help="Root of the disk tier (kept private, 0700).")
]
