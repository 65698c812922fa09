"""A real OpenAI-compatible HTTP server in a thread, with knobs, for client/validate/bench tests.

It speaks what vLLM's (or SGLang's) API server speaks on the wire: ``/v1/completions`` as
chunked SSE (``data: {...}`` events, a usage event with empty ``choices``, ``data: [DONE]``),
``/health``, ``/v1/models``, ``POST /tokenize``, ``POST /reset_prefix_cache`` (vLLM) or
``POST /flush_cache`` (SGLang) and ``/metrics`` in the engines' metric names, rendered by
prometheus_client. Behind it sits a toy prefix cache (block-granular, like vLLM's) and an
optional offload tier, so timings and counters move the way a real engine's do: a repeated
prompt is faster and counts hits; after a reset, a connector tier serves it.

Knobs (``ServerKnobs``) inject what real servers do wrong: HTTP errors, stalls, mid-stream
disconnects, malformed events, an error event, a connector in "degraded mode" that never hits.
"""

from __future__ import annotations

import hashlib
import json
import socket
import sys
import threading
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from kvstack.engines import vllm_guard

BOS = 1
BYTES_PER_TOKEN = 64  # the toy model's KV per token (LMCache's usage gauges and /status)


def tokenize(text: str) -> list[int]:
    """The server's tokenizer: BOS, then one id per whitespace-separated word (stable)."""
    return [BOS] + [zlib.crc32(w.encode()) % 50000 + 2 for w in text.split()]


@dataclass
class ServerKnobs:
    engine: str = "vllm"  # "vllm" | "sglang": metric names and the reset endpoint
    model: str = "demo-model"
    max_model_len: int = 8192  # in the /v1/models card, as vLLM reports it
    api_key: str | None = None
    # The run's control token, which kvstack's guard takes in place of the key (its router passes
    # it on as the bearer): the key check below is the guard's own rule (engines/vllm_guard.py).
    control_token: str | None = None
    connector: str | None = None  # None | "native" | "lmcache" | "hicache": an offload tier
    degraded: bool = False  # the connector exists but never stores or hits (LMCache degraded mode)
    disk_dir: str | None = None  # the tier writes a file per stored prompt here
    block_size: int = 16
    num_gpu_blocks: int = 4096
    cache_config_info: bool = True  # vLLM's vllm:cache_config_info (the block size) on /metrics
    gpu_hit_cap: int | None = None  # the engine's prefix cache serves at most this many tokens of a prompt
    # SGLang's sglang:prefill_effective_tokens counter (older SGLang had only the cache_hit_rate gauge)
    sglang_effective_tokens: bool = True
    base_ttft_s: float = 0.002
    prefill_s_per_token: float = 4e-5  # recompute cost
    tier_s_per_token: float = 4e-6  # cost of loading a token's KV from the tier
    # What the connector's path costs every request, hit or miss (LMCache's lookup and store: the
    # fixed cost that makes offload lose on short prompts).
    connector_request_s: float = 0.0
    itl_s: float = 0.001
    # Load: each request's TTFT grows by this for every request in flight when it arrives (itself
    # included), so that latency rises with concurrency as a saturated engine's does. A request
    # leaves the count before its last event is written: a closed loop of C never counts above C.
    ttft_s_per_in_flight: float = 0.0
    status: int = 200  # non-200: /v1/completions answers with this status and a JSON error
    stall_s: float = 0.0  # sleep before answering at all
    disconnect_after: int | None = None  # close the connection after this many token events
    malformed_after: int | None = None  # send a non-JSON data event after this many token events
    error_event: str | None = None  # send this error as an SSE event instead of tokens
    lead_empty_events: int = 0  # events with empty ``choices`` sent at once, before the prefill
    usage_cached_tokens: bool = False  # report usage.prompt_tokens_details.cached_tokens
    tokenize: bool = True  # serve POST /tokenize
    reset: bool = True  # serve the reset endpoint
    reset_fails: int = 0  # the first N resets answer success=false (blocks still held)
    metrics: bool = True
    health_status: int = 200
    split_events: bool = False  # send every SSE event in two TCP writes, cut mid-line
    # A keep-alive connection idle longer than this is closed, unread, when its next request comes
    # in: the worst case of uvicorn's keep-alive timer (vLLM: 5 s) firing as a request arrives.
    idle_close_s: float | None = None
    # Generated tokens follow from the prompt (greedy, margin 2 nats); from this position on, a
    # request the tier served gets the runner-up tokens instead: KV served wrong, hits counted.
    corrupt_tier_from: int | None = None
    corrupt_tier_at: int | None = None  # only this generated position of a tier-served request
    # At this absolute sequence position recompute's top two are one bf16 step (0.0625 nats) apart,
    # and a request served from any cache picks the runner-up: numerics, not corruption.
    near_tie_at: int | None = None
    # The scoring requests (recomputes) numbered so (0-based, in arrival order) see every position
    # ``score_shift`` nats off: one alone is a recompute that a busy batch moved, not the served KV;
    # a served answer's and its recompute's own answer's, a prompt on which the engine's decode sits
    # that far from its own prefill. ``shifted_scores_from``: every one from that number on.
    shifted_scores: tuple[int, ...] = ()
    shifted_scores_from: int | None = None
    score_shift: float = 0.0
    tier_hit_cap: int | None = None  # the tier serves at most this many tokens of a prompt
    token_ids: bool = True  # honour return_token_ids (token_ids per event, prompt_token_ids first)
    scoring: bool = True  # honour prompt_logprobs (vLLM) and /generate input logprobs (SGLang)
    served_logprobs: bool = True  # honour logprobs on a generating request (its own view of each token)
    # The connector is LMCache's cache server (``_LmcacheTiers``): chunks of ``chunk_tokens``
    # (default: the block size) in an LRU L1 of ``l1_tokens`` (None: unbounded) over an L2 that
    # keeps every chunk (write-through) behind adapter ``l2_adapter``. Its counters (lmcache_mp_*,
    # names and labels as lmcache 0.5.6 exports them, L1's lookups covering the prefix the engine
    # held too) are on this server's /metrics, so one URL serves as --lmcache. ``l2_fraction``
    # instead: that share of each request's tier hits counts as L2 hits, whatever L1 holds.
    lmcache_mp: bool = False
    l2_adapter: str = "fs"
    l2_fraction: float = 0.0
    chunk_tokens: int | None = None
    l1_tokens: int | None = None
    l2_s_per_token: float | None = None  # cost of loading a token from L2 (None: tier_s_per_token)


@dataclass
class _State:
    gpu: list[tuple[int, ...]] = field(default_factory=list)
    tier: list[tuple[int, ...]] = field(default_factory=list)
    lmcache: _LmcacheTiers | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    resets: int = 0
    connections: int = 0  # TCP connections accepted
    in_flight: int = 0  # completions between their arrival and their last token (ttft_s_per_in_flight)


TIE_STEP = 0.0625  # one bf16 step of a log-probability, as the demo model shows them


def toy_seed(tokens: tuple[int, ...]) -> int:
    """The toy model's 'context': its first 8 tokens (a validation prompt's nonce and BOS)."""
    return zlib.crc32(repr(tokens[:8]).encode())


def candidates(seed: int, pos: int, near_tie_at: int | None) -> tuple[int, float, int, float]:
    """(best id, its logprob, runner-up id, its logprob) at absolute sequence position ``pos``."""
    best, second = 100000 + (seed + pos) % 997, 200000 + (seed + pos) % 991
    return best, -0.1, second, -0.1 - (TIE_STEP if pos == near_tie_at else 2.0)


def token_text(token: int) -> str:
    return f" w{token}"


def _logprobs(seed: int, pos: int, token: int, near_tie_at: int | None) -> dict[str, Any]:
    """The generated token at ``pos`` with its top-2, in OpenAI's completions form, as the served
    path sees them: greedy picked ``token``, so in its own view ``token`` is the best candidate
    (KV served wrong makes the path confident in a token recompute ranks 2 nats down)."""
    best, lp_best, second, lp_second = candidates(seed, pos, near_tie_at)
    other = second if token == best else best
    return {
        "tokens": [token_text(token)],
        "token_logprobs": [lp_best],
        "top_logprobs": [{token_text(token): lp_best, token_text(other): lp_second}],
        "text_offset": [0],
    }


def prompt_logprobs(tokens: tuple[int, ...], k: int, near_tie_at: int | None) -> list[Any]:
    """vLLM's ``prompt_logprobs``: None, then per position {"<id>": {logprob, rank, decoded_token}}."""
    seed = toy_seed(tokens)
    out: list[Any] = [None]
    for pos in range(1, len(tokens)):
        best, lp_best, second, lp_second = candidates(seed, pos, near_tie_at)
        entry = {best: (lp_best, 1), second: (lp_second, 2)}
        actual = tokens[pos]
        if actual not in entry:
            entry[actual] = (-9.0, 1000)
        top = sorted(entry.items(), key=lambda kv: kv[1][1])
        shown = [kv for kv in top if kv[1][1] <= k or kv[0] == actual]
        out.append(
            {str(t): {"logprob": lp, "rank": rank, "decoded_token": token_text(t)} for t, (lp, rank) in shown}
        )
    return out


def sglang_input_logprobs(tokens: tuple[int, ...], k: int, near_tie_at: int | None) -> dict[str, Any]:
    """SGLang's meta_info: input_token_logprobs [(lp, id, text)], input_top_logprobs per position."""
    seed = toy_seed(tokens)
    chosen: list[Any] = [[None, tokens[0], None]]
    tops: list[Any] = [None]
    for pos in range(1, len(tokens)):
        best, lp_best, second, lp_second = candidates(seed, pos, near_tie_at)
        lp = {best: lp_best, second: lp_second}.get(tokens[pos], -9.0)
        chosen.append([lp, tokens[pos], None])
        tops.append([[lp_best, best, None], [lp_second, second, None]][:k])
    return {"input_token_logprobs": chosen, "input_top_logprobs": tops}


def _recompute_answer(tokens: tuple[int, ...], n: int, near_tie_at: int | None) -> dict[str, Any]:
    """A non-streamed answer that read no cache: recompute's own greedy tokens, their ids and own
    log-probabilities, in OpenAI's completions form."""
    seed = toy_seed(tokens)
    ids = [candidates(seed, len(tokens) + i, near_tie_at)[0] for i in range(n)]
    parts = [_logprobs(seed, len(tokens) + i, t, near_tie_at) for i, t in enumerate(ids)]
    logprobs = {
        key: [x for part in parts for x in part[key]] for key in ("tokens", "token_logprobs", "top_logprobs")
    }
    return {"text": "".join(token_text(t) for t in ids), "token_ids": ids, "logprobs": logprobs}


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class _LmcacheTiers:
    """LMCache's cache server as the engine meets it (lmcache/v1/multiprocess/modules/lookup.py):
    a prompt's whole chunks keyed by a hash chain; a lookup finds the contiguous prefix held in
    L1 or L2, L1 credited with the prefix its own chunks serve and L2 with the rest; what L2 served
    is not kept in L1 (its prefetch policy retains nothing); new chunks go to L1 and L2."""

    def __init__(self, chunk: int, l1_chunks: int | None) -> None:
        self.chunk = chunk
        self.l1_chunks = l1_chunks
        self.l1: OrderedDict[int, None] = OrderedDict()
        self.l2: set[int] = set()

    def keys(self, tokens: tuple[int, ...]) -> list[int]:
        out: list[int] = []
        key = 0
        for end in range(self.chunk, len(tokens) + 1, self.chunk):
            key = hash((key, tokens[end - self.chunk : end]))
            out.append(key)
        return out

    def lookup(self, keys: list[int]) -> tuple[int, int]:
        """(chunks L1 serves, chunks L1 and L2 serve together), both from the first chunk."""
        l1 = 0
        while l1 < len(keys) and keys[l1] in self.l1:
            l1 += 1
        hit = l1
        while hit < len(keys) and (keys[hit] in self.l1 or keys[hit] in self.l2):
            hit += 1
        return l1, hit

    def store(self, keys: list[int], l1: int, hit: int) -> None:
        for key in keys[:l1]:
            self.l1.move_to_end(key)
        for key in keys[hit:]:
            self.l1[key] = None
            self.l1.move_to_end(key)
            self.l2.add(key)
        while self.l1_chunks is not None and len(self.l1) > self.l1_chunks:
            self.l1.popitem(last=False)


@dataclass(frozen=True)
class _Lookup:
    """One request's LMCache lookup: tokens looked up, found in L1, found in L1 and L2."""

    requested: int = 0
    l1: int = 0
    hit: int = 0


class _Metrics:
    def __init__(self, knobs: ServerKnobs) -> None:
        self.registry = CollectorRegistry()
        reg = self.registry
        self.k = knobs
        if knobs.engine == "vllm":
            # Names and labels as vllm/v1/metrics/loggers.py declares them.
            lab = ["model_name", "engine"]
            self.lv = [knobs.model, "0"]
            self.queries = Counter("vllm:prefix_cache_queries", "Prefix cache queries", lab, registry=reg)
            self.hits = Counter("vllm:prefix_cache_hits", "Prefix cache hits", lab, registry=reg)
            self.ext_queries = Counter(
                "vllm:external_prefix_cache_queries", "External prefix cache queries", lab, registry=reg
            )
            self.ext_hits = Counter(
                "vllm:external_prefix_cache_hits", "External prefix cache hits", lab, registry=reg
            )
            self.by_source = Counter(
                "vllm:prompt_tokens_by_source", "Prompt tokens by source", [*lab, "source"], registry=reg
            )
            self.cached_by_source = Counter(
                "vllm:prompt_tokens_cached_by_source", "Cached tokens by tier", [*lab, "source"], registry=reg
            )
            self.prompt_tokens = Counter("vllm:prompt_tokens", "Prefill tokens", lab, registry=reg)
            info = Gauge(
                "vllm:cache_config_info",
                "Information of the LLMEngine CacheConfig",
                ["block_size", "num_gpu_blocks", "enable_prefix_caching", "engine"],
                registry=reg,
            )
            if knobs.cache_config_info:
                info.labels(str(knobs.block_size), str(knobs.num_gpu_blocks), "True", "0").set(1)
            for q in (self.queries, self.hits, self.ext_queries, self.ext_hits, self.prompt_tokens):
                q.labels(*self.lv)
            for src in ("local_compute", "local_cache_hit", "external_kv_transfer"):
                self.by_source.labels(*self.lv, src)
            # Scheduler gauges and the TTFT histogram (vllm/v1/metrics/loggers.py).
            self.running = Gauge("vllm:num_requests_running", "Running requests", lab, registry=reg)
            self.waiting = Gauge("vllm:num_requests_waiting", "Waiting requests", lab, registry=reg)
            self.kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 1 = 100%", lab, registry=reg)
            self.ttft = Histogram(
                "vllm:time_to_first_token_seconds",
                "Time to first token",
                lab,
                buckets=(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0),
                registry=reg,
            )
            for g in (self.running, self.waiting, self.kv_usage):
                g.labels(*self.lv).set(0)
            self.ttft.labels(*self.lv)
            if knobs.lmcache_mp:
                self._lmcache_mp(reg, knobs)
            if knobs.connector == "lmcache":
                llab = ["model_name", "worker_id", "role", "served_model_name"]
                self.llv = [knobs.model, "0", "worker", knobs.model]
                self.lm_hits = Counter("lmcache:num_hit_tokens", "Hit tokens", llab, registry=reg)
                self.lm_stored = Counter("lmcache:num_stored_tokens", "Stored tokens", llab, registry=reg)
                self.lm_hits.labels(*self.llv)
                self.lm_stored.labels(*self.llv)
        else:
            lab = ["model_name", "tp_rank"]
            self.lv = [knobs.model, "0"]
            self.effective = Counter(
                "sglang:prefill_effective_tokens", "Effective prefill tokens", [*lab, "mode"], registry=reg
            )
            if knobs.sglang_effective_tokens:
                for mode in ("input", "device_hit", "host_hit", "storage_hit"):
                    self.effective.labels(*self.lv, mode)
            self.hit_rate = Gauge("sglang:cache_hit_rate", "The cache hit rate", lab, registry=reg)
            self.hit_rate.labels(*self.lv).set(0)
            Gauge("sglang:max_total_num_tokens", "Max tokens", lab, registry=reg).labels(*self.lv).set(
                knobs.num_gpu_blocks * knobs.block_size
            )

    def _lmcache_mp(self, reg: CollectorRegistry, knobs: ServerKnobs) -> None:
        mlab = ["model_name", "cache_salt"]
        self.mlv = [knobs.model, ""]
        self.mp_requested = Counter("lmcache_mp_lookup_requested_tokens", "Looked up", mlab, registry=reg)
        self.mp_hit = Counter("lmcache_mp_lookup_hit_tokens", "L1 + L2 hits", mlab, registry=reg)
        self.mp_l1 = Counter("lmcache_mp_lookup_hit_l1_tokens", "L1 hits", mlab, registry=reg)
        self.mp_l2 = Counter("lmcache_mp_lookup_hit_l2_tokens", "L2 hits", mlab, registry=reg)
        # Created at the first event, as the OTel exporter does: absent until something is loaded.
        self.mp_loads = Counter(
            "lmcache_mp_l2_load_completed_requests", "L2 loads", ["l2_name"], registry=reg
        )
        self.mp_stores = Counter(
            "lmcache_mp_l2_store_completed_requests", "L2 stores", ["l2_name"], registry=reg
        )
        self.mp_l2_usage = Gauge("lmcache_mp_l2_usage_bytes", "L2 usage", ["l2_name"], registry=reg)
        self.mp_l2_usage.labels(knobs.l2_adapter).set(0)
        llab = ["backend", "l1_tag"]
        self.mp_l1_usage = Gauge("lmcache_mp_l1_memory_usage_bytes", "L1 usage", llab, registry=reg)
        self.mp_l1_ratio = Gauge("lmcache_mp_l1_usage_ratio", "L1 usage ratio", llab, registry=reg)
        self.mp_l1_usage.labels("dram", "_default").set(0)
        self.mp_l1_ratio.labels("dram", "_default").set(0)
        self.mp_l1_bytes = 0

    def record_ttft(self, seconds: float) -> None:
        if self.k.engine == "vllm":
            self.ttft.labels(*self.lv).observe(seconds)

    def record(self, total: int, gpu_hit: int, tier_hit: int, lookup: _Lookup | None = None) -> None:
        computed = total - gpu_hit - tier_hit
        if self.k.engine == "vllm":
            self.queries.labels(*self.lv).inc(total)
            self.hits.labels(*self.lv).inc(gpu_hit)
            self.prompt_tokens.labels(*self.lv).inc(total)
            self.by_source.labels(*self.lv, "local_compute").inc(computed)
            self.by_source.labels(*self.lv, "local_cache_hit").inc(gpu_hit)
            if gpu_hit:
                self.cached_by_source.labels(*self.lv, "device").inc(gpu_hit)
            if self.k.connector:
                self.ext_queries.labels(*self.lv).inc(total - gpu_hit)
                self.ext_hits.labels(*self.lv).inc(tier_hit)
                self.by_source.labels(*self.lv, "external_kv_transfer").inc(tier_hit)
                if tier_hit:
                    source = "external_unspecified" if self.k.lmcache_mp else "host"
                    self.cached_by_source.labels(*self.lv, source).inc(tier_hit)
            if self.k.lmcache_mp:
                self._record_mp(total, lookup or _Lookup())
            if self.k.connector == "lmcache":
                self.lm_hits.labels(*self.llv).inc(tier_hit)
                if not self.k.degraded:
                    self.lm_stored.labels(*self.llv).inc(total)
        else:
            if self.k.sglang_effective_tokens:
                self.effective.labels(*self.lv, "input").inc(computed)
                self.effective.labels(*self.lv, "device_hit").inc(gpu_hit)
                self.effective.labels(*self.lv, "host_hit").inc(tier_hit)
            self.hit_rate.labels(*self.lv).set((gpu_hit + tier_hit) / total if total else 0)

    def _record_mp(self, total: int, lookup: _Lookup) -> None:
        l2 = lookup.hit - lookup.l1
        self.mp_requested.labels(*self.mlv).inc(lookup.requested)
        self.mp_hit.labels(*self.mlv).inc(lookup.hit)
        self.mp_l1.labels(*self.mlv).inc(lookup.l1)
        self.mp_l2.labels(*self.mlv).inc(l2)
        if l2:
            self.mp_loads.labels(self.k.l2_adapter).inc()
        if not self.k.degraded:
            self.mp_stores.labels(self.k.l2_adapter).inc()
            self.mp_l1_bytes += total * BYTES_PER_TOKEN
            self.mp_l1_usage.labels("dram", "_default").set(self.mp_l1_bytes)
            self.mp_l1_ratio.labels("dram", "_default").set(self.mp_l1_bytes / (1 << 30))  # a 1 GiB L1
            self.mp_l2_usage.labels(self.k.l2_adapter).set(self.mp_l1_bytes)

    def text(self) -> bytes:
        return generate_latest(self.registry)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # bench tests open hundreds of connections at once

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that drop a keep-alive connection are normal; anything else is a bug to show.
        exc = sys.exc_info()[1]
        if not isinstance(exc, (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class StreamServer:
    """``with StreamServer(ServerKnobs(...)) as srv: ... srv.url ...`` (127.0.0.1, a free port)."""

    def __init__(self, knobs: ServerKnobs | None = None) -> None:
        self.knobs = knobs or ServerKnobs()
        self.scores = 0  # scoring requests (recomputes) answered
        self.state = _State()
        self.lock = threading.Lock()
        self.metrics = _Metrics(self.knobs)
        owner = self

        class Handler(_Handler):
            server_owner = owner

        self.httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True, name="stream-server")

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def reset_path(self) -> str:
        return "/reset_prefix_cache" if self.knobs.engine == "vllm" else "/flush_cache"

    @property
    def connections(self) -> int:
        with self.lock:
            return self.state.connections

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.state.requests)

    def start(self) -> StreamServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> StreamServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- the toy engine -----------------------------------------------------------------

    def prefill(self, tokens: tuple[int, ...], read_cache: bool = True) -> tuple[int, int, int]:
        """Cache lookup + insert; returns (gpu_hit_tokens, tier_hit_tokens, of those the tokens
        LMCache's L2 served) and records metrics.

        ``read_cache=False``: a request that must recompute (prompt log-probabilities) still
        stores what it computed, as vLLM's does, but reads nothing (LMCache still counts the
        lookup: vLLM asks its connector and then drops the answer)."""
        k = self.knobs
        bs = k.block_size
        # Like vLLM: whole blocks only, and the last token is always recomputed.
        cap = ((len(tokens) - 1) // bs) * bs
        with self.lock:
            gpu = max((_common_prefix(tokens, c) for c in self.state.gpu), default=0) if read_cache else 0
            gpu_hit = min((gpu // bs) * bs, cap)
            if k.gpu_hit_cap is not None:
                gpu_hit = min(gpu_hit, k.gpu_hit_cap)
            tier_hit = l2_hit = 0
            lookup: _Lookup | None = None
            if k.connector and k.lmcache_mp:
                tier_hit, l2_hit, lookup = self._lmcache(tokens, gpu_hit, read_cache)
            elif k.connector and not k.degraded and read_cache:
                tier = max((_common_prefix(tokens, c) for c in self.state.tier), default=0)
                tier_hit = max(0, min((tier // bs) * bs, cap) - gpu_hit)
                if k.tier_hit_cap is not None:
                    tier_hit = min(tier_hit, k.tier_hit_cap)
            self.state.gpu.append(tokens)
            # A bounded pool: the least recently stored prompts are evicted first.
            capacity = k.num_gpu_blocks * bs
            while len(self.state.gpu) > 1 and sum(map(len, self.state.gpu)) > capacity:
                self.state.gpu.pop(0)
            if k.connector and not k.degraded:
                self.state.tier.append(tokens)
                if k.disk_dir:
                    name = f"{zlib.crc32(repr(tokens).encode()):08x}.kv"
                    (Path(k.disk_dir) / name).write_bytes(b"\0" * (len(tokens) * 64))
            self.state.requests.append(
                {
                    "tokens": len(tokens),
                    "gpu_hit": gpu_hit,
                    "tier_hit": tier_hit,
                    "dram_hit": tier_hit - l2_hit,
                    "l2_hit": l2_hit,
                }
            )
            self.metrics.record(len(tokens), gpu_hit, tier_hit, lookup)
        return gpu_hit, tier_hit, l2_hit

    def _lmcache(self, tokens: tuple[int, ...], gpu_hit: int, read_cache: bool) -> tuple[int, int, _Lookup]:
        """LMCache's lookup and store for one request: (tokens loaded, of those from L2, the lookup)."""
        k = self.knobs
        if self.state.lmcache is None:
            chunk = k.chunk_tokens or k.block_size
            self.state.lmcache = _LmcacheTiers(
                chunk, k.l1_tokens // chunk if k.l1_tokens is not None else None
            )
        lm = self.state.lmcache
        keys = lm.keys(tokens)
        l1_chunks, hit_chunks = (0, 0) if k.degraded else lm.lookup(keys)
        hit, l1 = hit_chunks * lm.chunk, l1_chunks * lm.chunk
        if k.l2_fraction:
            l1 = hit - round(max(0, hit - gpu_hit) * k.l2_fraction)
        tier_hit = max(0, hit - gpu_hit) if read_cache else 0
        if k.tier_hit_cap is not None:
            tier_hit = min(tier_hit, k.tier_hit_cap)
        dram = min(tier_hit, max(0, l1 - gpu_hit))
        if not k.degraded:
            lm.store(keys, l1_chunks, hit_chunks)
        return tier_hit, tier_hit - dram, _Lookup(len(keys) * lm.chunk, l1, hit)

    def lmcache_status(self) -> dict[str, Any]:
        """LMCache's ``GET /status`` (lmcache 0.5.6's keys, trimmed): chunk size, L1 (64 bytes per
        token, as the counters' usage gauges), its exact-capacity LRU, and the L2 adapter."""
        k = self.knobs
        chunk = k.chunk_tokens or k.block_size
        with self.lock:
            held = len(self.state.lmcache.l1) if self.state.lmcache else 0
        total = (k.l1_tokens if k.l1_tokens is not None else 1 << 24) * BYTES_PER_TOKEN
        kind = {"fs": "FSL2Adapter", "fs_native": "FSNativeL2Adapter", "resp": "RESPL2Adapter"}
        return {
            "chunk_size": chunk,
            "storage_manager": {
                "l1_manager": {
                    "total_object_count": held,
                    "memory_used_bytes": held * chunk * BYTES_PER_TOKEN,
                    "memory_total_bytes": total,
                },
                "l1_eviction_controller": {
                    "eviction_policy": "LRU",
                    "trigger_watermark": 1.0,
                    "eviction_ratio": 0.0,
                },
                "l2_eviction_controller": {"adapters": []},
                "l2_adapters": [{"type": kind.get(k.l2_adapter, k.l2_adapter)}],
            },
        }

    def reset_gpu(self) -> bool:
        with self.lock:
            self.state.resets += 1
            if self.state.resets <= self.knobs.reset_fails:
                return False
            self.state.gpu.clear()
            if self.knobs.engine == "sglang":
                self.state.tier.clear()  # SGLang's flush also empties HiCache's host pool
        return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_owner: StreamServer

    def setup(self) -> None:
        super().setup()
        # Real servers (uvicorn) disable Nagle; without it small SSE chunks wait ~40 ms for an ACK.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server_owner.lock:
            self.server_owner.state.connections += 1

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        return

    def handle_one_request(self) -> None:
        idle_close_s = self.server_owner.knobs.idle_close_s
        done = getattr(self, "_answered_at", None)
        if idle_close_s is not None and done is not None:
            try:
                arrived = self.connection.recv(1, socket.MSG_PEEK)  # blocks until the next request
            except OSError:
                arrived = b""
            if not arrived or time.monotonic() - done > idle_close_s:
                self.close_connection = True
                return
        super().handle_one_request()
        self._answered_at = time.monotonic()

    # --- plumbing -----------------------------------------------------------------------

    def _json(self, status: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b"{}"
        data = json.loads(raw or b"{}")
        return data if isinstance(data, dict) else {}

    def _authorized(self) -> bool:
        """The key as kvstack's guard in front of vLLM checks it on a client route."""
        knobs = self.server_owner.knobs
        key_hash = hashlib.sha256(knobs.api_key.encode()).digest() if knobs.api_key else None
        token = knobs.control_token
        control_hash = hashlib.sha256(token.encode()).digest() if token else None
        headers = {k.lower().encode("latin-1"): v.encode("latin-1") for k, v in self.headers.items()}
        path = self.path.split("?", 1)[0]
        denied = vllm_guard.decide(
            path, self.command, headers, True, key_hash, control_hash, kind_of=lambda _: "client"
        )
        if denied is not None:
            self._json(denied[0], {"error": denied[1]})
            return False
        return True

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, obj: Any) -> None:
        event = b"data: " + json.dumps(obj).encode() + b"\n\n"
        if self.server_owner.knobs.split_events:
            cut = len(event) // 2
            self._chunk(event[:cut])
            time.sleep(0.002)  # long enough for the client to read the first half on its own
            event = event[cut:]
        self._chunk(event)

    # --- routes -------------------------------------------------------------------------

    def do_GET(self) -> None:
        srv = self.server_owner
        k = srv.knobs
        if self.path == "/health":
            self._json(k.health_status, {} if k.health_status == 200 else {"error": "starting"})
        elif self.path == "/v1/models":
            if self._authorized():
                card = {"id": k.model, "object": "model", "max_model_len": k.max_model_len}
                self._json(200, {"object": "list", "data": [card]})
        elif self.path == "/status" and k.lmcache_mp:
            self._json(200, srv.lmcache_status())
        elif self.path == "/metrics" and k.metrics:
            with srv.lock:
                body = srv.metrics.text()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        srv = self.server_owner
        k = srv.knobs
        body = self._body()
        if self.path == "/tokenize" and k.tokenize:
            if self._authorized():
                toks = tokenize(str(body.get("prompt", "")))
                self._json(200, {"count": len(toks), "max_model_len": k.max_model_len, "tokens": toks})
        elif self.path.split("?")[0] == srv.reset_path and k.reset:
            ok = srv.reset_gpu()
            self._json(200, {"success": ok})
        elif self.path == "/v1/completions":
            if self._authorized():
                scoring = body.get("prompt_logprobs") is not None and not body.get("stream")
                if scoring and k.engine == "vllm":
                    self._score(body)
                elif scoring:
                    self._plain(body)
                else:
                    self._complete(body)
        elif self.path == "/generate" and k.engine == "sglang":
            if self._authorized():
                self._generate(body)
        else:
            self._json(404, {"detail": "Not Found"})

    def _score(self, body: dict[str, Any]) -> None:
        """vLLM's non-streamed completion with prompt_logprobs: a recompute (salted, no cache read)."""
        k = self.server_owner.knobs
        tokens = tuple(int(t) for t in body.get("prompt", []))
        salt = body.get("cache_salt")
        self.server_owner.prefill(
            (zlib.crc32(str(salt).encode()), *tokens) if salt else tokens, read_cache=False
        )
        with self.server_owner.lock:
            number = self.server_owner.scores
            self.server_owner.scores += 1
        choice: dict[str, Any] = {"index": 0, "text": " x", "finish_reason": "length"}
        if k.scoring:
            scores = prompt_logprobs(tokens, int(body["prompt_logprobs"]), k.near_tie_at)
            onward = k.shifted_scores_from is not None and number >= k.shifted_scores_from
            if onward or number in k.shifted_scores:
                for position in scores[1:]:
                    for entry in position.values():
                        entry["logprob"] -= k.score_shift
            choice["prompt_logprobs"] = scores
        if int(body.get("max_tokens", 1)) > 1 and body.get("logprobs") is not None:
            answer = _recompute_answer(tokens, int(body["max_tokens"]), k.near_tie_at)
            if not k.token_ids:
                del answer["token_ids"]
            choice.update(answer)
        self._json(200, {"id": "cmpl-score", "object": "text_completion", "choices": [choice]})

    def _plain(self, body: dict[str, Any]) -> None:
        """SGLang's non-streamed completion: one JSON answer. Its CompletionRequest has no
        ``prompt_logprobs`` (pydantic drops the unknown field), so vLLM's scoring request gets an
        ordinary completion back."""
        k = self.server_owner.knobs
        prompt = body.get("prompt", "")
        tokens = tuple(prompt) if isinstance(prompt, list) else tuple(tokenize(str(prompt)))
        self.server_owner.prefill(tokens)
        choice = {"index": 0, "text": " x", "finish_reason": "length"}
        usage = {"prompt_tokens": len(tokens), "completion_tokens": 1, "total_tokens": len(tokens) + 1}
        self._json(200, {"id": "cmpl-plain", "object": "text_completion", "model": k.model,
                         "choices": [choice], "usage": usage})  # fmt: skip

    def _generate(self, body: dict[str, Any]) -> None:
        """SGLang's native /generate with input log-probabilities (logprob_start_len 0: no cache read)."""
        k = self.server_owner.knobs
        tokens = tuple(int(t) for t in body.get("input_ids", []))
        self.server_owner.prefill(tokens, read_cache=False)
        meta: dict[str, Any] = {"id": "gen", "prompt_tokens": len(tokens)}
        if k.scoring and body.get("return_logprob"):
            meta.update(sglang_input_logprobs(tokens, int(body.get("top_logprobs_num") or 1), k.near_tie_at))
        self._json(200, {"text": " x", "output_ids": [5], "meta_info": meta})

    def _complete(self, body: dict[str, Any]) -> None:
        srv = self.server_owner
        k = srv.knobs
        if k.stall_s:
            time.sleep(k.stall_s)
        if k.status != 200:
            self._json(k.status, {"error": {"message": f"injected failure {k.status}", "code": k.status}})
            return
        prompt = body.get("prompt", "")
        tokens = tuple(prompt) if isinstance(prompt, list) else tuple(tokenize(str(prompt)))
        max_tokens = int(body.get("max_tokens", 16))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if k.error_event:
            self._event({"error": {"message": k.error_event, "type": "InternalServerError", "code": 500}})
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
            return
        for _ in range(k.lead_empty_events):
            self._event({"id": "cmpl-test", "object": "text_completion", "model": k.model, "choices": []})
        # vLLM keys cached blocks by cache_salt too: a salted prompt shares nothing with an unsalted one.
        salt = body.get("cache_salt")
        gpu_hit, tier_hit, l2_hit = srv.prefill((zlib.crc32(str(salt).encode()), *tokens) if salt else tokens)
        computed = len(tokens) - gpu_hit - tier_hit
        l2_s = k.tier_s_per_token if k.l2_s_per_token is None else k.l2_s_per_token
        fetch = (tier_hit - l2_hit) * k.tier_s_per_token + l2_hit * l2_s
        ttft = k.base_ttft_s + computed * k.prefill_s_per_token + fetch
        if k.connector and not k.degraded:
            ttft += k.connector_request_s
        counted = k.ttft_s_per_in_flight > 0
        if counted:
            self._left = False
            with srv.lock:
                srv.state.in_flight += 1
                ttft += k.ttft_s_per_in_flight * srv.state.in_flight
        try:
            time.sleep(ttft)
            self._tokens(body, tokens, max_tokens, gpu_hit, tier_hit, ttft, counted)
        finally:
            if counted:
                self._leave()

    def _leave(self) -> None:
        """This request is no longer in flight (once: before its last event, or when it ends early)."""
        srv = self.server_owner
        if getattr(self, "_left", False):
            return
        self._left = True
        with srv.lock:
            srv.state.in_flight -= 1

    def _tokens(
        self, body: dict[str, Any], tokens: tuple[int, ...], max_tokens: int, gpu_hit: int, tier_hit: int,
        ttft: float, counted: bool,
    ) -> None:  # fmt: skip
        srv = self.server_owner
        k = srv.knobs
        with srv.lock:
            srv.metrics.record_ttft(ttft)
        seed = toy_seed(tokens)
        want_ids = bool(body.get("return_token_ids")) and k.token_ids
        for i in range(max_tokens):
            if k.disconnect_after is not None and i >= k.disconnect_after:
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if k.malformed_after is not None and i >= k.malformed_after:
                self._chunk(b"data: {not json\n\n")
                self._chunk(b"")
                return
            if i:
                time.sleep(k.itl_s)
            finish = "length" if i == max_tokens - 1 else None
            if finish and counted:
                self._leave()  # before the last event: the client cannot send its next request first
            pos = len(tokens) + i
            best, _, second, _ = candidates(seed, pos, k.near_tie_at)
            wrong = tier_hit > 0 and (
                (k.corrupt_tier_from is not None and i >= k.corrupt_tier_from) or i == k.corrupt_tier_at
            )
            tie_flip = pos == k.near_tie_at and (gpu_hit or tier_hit) > 0
            token = second if wrong or tie_flip else best
            choice: dict[str, Any] = {
                "index": 0,
                "text": token_text(token),
                "logprobs": _logprobs(seed, pos, token, k.near_tie_at)
                if body.get("logprobs") is not None and k.served_logprobs
                else None,
                "finish_reason": finish,
            }
            if want_ids:
                choice["token_ids"] = [token]
                if i == 0:
                    choice["prompt_token_ids"] = list(tokens)
            self._event(
                {
                    "id": "cmpl-test",
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": k.model,
                    "choices": [choice],
                    "usage": None,
                }
            )
        usage: dict[str, Any] = {
            "prompt_tokens": len(tokens),
            "completion_tokens": max_tokens,
            "total_tokens": len(tokens) + max_tokens,
        }
        if k.usage_cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": gpu_hit + tier_hit}
        final = {"id": "cmpl-test", "object": "text_completion", "model": k.model}
        final.update(choices=[], usage=usage)
        self._event(final)
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")
