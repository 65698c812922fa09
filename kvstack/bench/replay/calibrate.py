"""A short calibration against the served layout, after its replay: the costs the plan's TTFT
model needs on this machine (planning/predict/served_ttft.py), measured in under a minute.

Unique prompts (token blocks under hash ids no trace uses: negative ones) at a few lengths give
the cost of a miss; each sent again gives the cost of a prompt the engine holds whole. On an
offload layout, one prompt is then dropped from the engine's pool (vLLM's POST /reset_prefix_cache,
which keeps the offload tiers, where kvstack may call it; else pushed out by other unique prompts,
more tokens than the pool holds) and sent again: the offload tier's DRAM serves it, which gives the
fetch cost per token, but only where the counters say so: the servers' counters are read around
that request (clients/token_sources.py's one rule, per request), and a sample the DRAM tier did
not serve whole (L1 had evicted it too, so disk served it; or part was recomputed) is discarded,
and the costs' source says why. Run after the replay, so the replay's hit ratios are not disturbed.

Decode, for the step-level simulator: ``B`` requests at once (B in DECODE_BATCHES, up to the
engine's ``max_num_seqs`` and what its pool holds), each a short unique prompt and exactly
DECODE_TOKENS output tokens (the streaming client asks ``ignore_eos``), each request's time per
output token read from its stream (first token to last, over the tokens between); the median per
``B`` fitted by least squares to ``step_s(B) = decode_fixed_s + decode_per_seq_s x B``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import replace

import httpx
import numpy as np

from kvstack.bench.replay import results
from kvstack.bench.replay.prompts import BlockTokens
from kvstack.clients import token_sources
from kvstack.clients.client import auth_headers, make_client
from kvstack.clients.metrics import MetricsSnapshot, scrape
from kvstack.clients.reset import reset_cache
from kvstack.clients.streaming import RequestResult, StreamClient
from kvstack.errors import EngineError
from kvstack.planning.predict.served_ttft import ServedCosts, fit_costs, nonneg_fit

# Up to 8192 where the context allows: the attention term is fitted, not extrapolated, over most of
# a replay's prompts (a 16K context's longest prompts are 2x past it, not 4x). With 4096 at most, a
# second of noise on one long miss tripled the fitted term and put a plain layout's predicted p90 at
# 2.1x the measured.
LENGTHS = (512, 1024, 2048, 4096, 8192)
REPEATS = 2
# Decode: B requests decoding together, each a unique DECODE_PROMPT_TOKENS-token prompt (a few KV
# blocks) and DECODE_TOKENS output tokens. On the demo model here: 0.3 s a round on a plain vLLM,
# 1-2 s on the demo's lmcache-mp serve with the machine loaded (the whole sweep calibration: 4.4 s).
DECODE_BATCHES = (1, 2, 4, 8)
DECODE_TOKENS = 32
DECODE_PROMPT_TOKENS = 64


def calibration_lengths(max_prompt: int) -> list[int]:
    """The miss lengths sent: every one of LENGTHS the context allows (the shortest prompt it takes
    when it allows none)."""
    return [n for n in LENGTHS if n <= max_prompt] or [max(16, max_prompt)]


class _Prompts:
    """Unique prompts: each from fresh (negative) hash ids, so no trace block and no other prompt
    shares a prefix with it."""

    def __init__(self, blocks: BlockTokens) -> None:
        self.blocks = blocks
        self.next_id = -1

    def unique(self, tokens: int) -> list[int]:
        out: list[int] = []
        for _ in range(math.ceil(tokens / self.blocks.block_tokens)):
            out.extend(self.blocks.block(self.next_id))
            self.next_id -= 1
        return out[:tokens]


def decode_batches(max_num_seqs: int | None, pool_tokens: int | None) -> list[int]:
    """The batch sizes decode is measured at: DECODE_BATCHES up to the engine's ``max_num_seqs``
    (None: its default, above them all) and the ``pool_tokens`` its KV pool holds (every request's
    prompt and output at once, none preempted)."""
    per_request = DECODE_PROMPT_TOKENS + DECODE_TOKENS
    return [
        b
        for b in DECODE_BATCHES
        if (max_num_seqs is None or b <= max_num_seqs)
        and (pool_tokens is None or b * per_request <= pool_tokens)
    ]


def tpot_s(result: RequestResult) -> float | None:
    """A request's time per output token after its first (its first token to its last, over the
    tokens between); None for a failed request or one with fewer than two tokens."""
    if not result.ok or result.output_tokens < 2 or not result.itl_s:
        return None
    return sum(result.itl_s) / (result.output_tokens - 1)


def fit_decode(samples: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """``(decode_fixed_s, decode_per_seq_s)`` from (batch size, time per output token) samples: the
    median per batch size, fitted by least squares to ``fixed + per_seq x B`` (neither negative);
    None with fewer than two batch sizes (one cannot tell the two parts apart)."""
    by_batch: dict[int, list[float]] = {}
    for batch, seconds in samples:
        by_batch.setdefault(batch, []).append(seconds)
    if len(by_batch) < 2:
        return None
    b = np.array(sorted(by_batch), dtype=np.float64)
    y = np.array([float(np.median(by_batch[int(k)])) for k in b])
    fixed, per_seq = nonneg_fit([np.ones_like(b), b], y)
    return fixed, per_seq


async def _decode(
    client: StreamClient, model: str, prompts: _Prompts, api_key: str | None, batches: Sequence[int]
) -> list[tuple[int, float]]:
    """(batch size, time per output token) per request: ``b`` requests sent at once for each ``b``."""
    samples: list[tuple[int, float]] = []
    for b in batches:
        sent = [prompts.unique(DECODE_PROMPT_TOKENS) for _ in range(b)]
        done = await asyncio.gather(
            *(client.completion(model, p, DECODE_TOKENS, api_key=api_key, timeout_s=120) for p in sent)
        )
        for res in done:
            if not res.ok:
                raise EngineError(
                    f"a calibration request failed: {res.error or res.status}", hint="see the engine's log"
                )
            if (tpot := tpot_s(res)) is not None and res.output_tokens == DECODE_TOKENS:
                samples.append((b, tpot))
    return samples


async def _ttft(client: StreamClient, model: str, prompt: list[int], api_key: str | None) -> float:
    res = await client.completion(model, prompt, 1, api_key=api_key, timeout_s=120)
    if not res.ok or res.ttft_s is None:
        raise EngineError(
            f"a calibration request failed: {res.error or res.status}", hint="see the engine's log"
        )
    return res.ttft_s


async def calibrate(
    base_url: str,
    model: str,
    blocks: BlockTokens,
    *,
    api_key: str | None,
    max_prompt: int,
    engine_pool_tokens: int | None,
    metrics_urls: Sequence[str] = (),
    align: int = 1,
    reset_path: str | None = None,
    max_num_seqs: int | None = None,
    lengths: Sequence[int] | None = None,
    flush: bool = True,
) -> ServedCosts:
    """The layout's costs; ``engine_pool_tokens`` (the engine's prefix cache, in tokens) only for
    an offload layout, whose DRAM fetch is measured too (read from ``metrics_urls``; prompts are
    held in whole units of ``align`` tokens). ``reset_path``: the engine's route that empties its
    own prefix cache and keeps the offload tiers (vLLM's), tried before pushing a prompt out.
    ``max_num_seqs``: the engine's, where known (decode's batch sizes stay under it; the pool
    holds at least the context, ``max_prompt``). ``lengths``: the miss lengths sent (default
    ``calibration_lengths(max_prompt)``). ``flush``: push the DRAM sample out of the engine's pool
    with other prompts where the reset did not drop it (False: no DRAM sample then)."""
    prompts = _Prompts(blocks)
    lengths = list(lengths) if lengths else calibration_lengths(max_prompt)
    batches = decode_batches(max_num_seqs, engine_pool_tokens or max_prompt)
    hits: list[float] = []
    misses: list[tuple[int, float]] = []
    fetched: list[tuple[str, int, float]] = []
    fetch_note = ""
    streams = max([2, *batches])
    async with StreamClient(base_url, streams) as client, make_client(base_url, max_connections=2) as scraper:
        await _ttft(client, model, prompts.unique(64), api_key)  # warm the path (first-request costs)
        decoded: list[tuple[int, float]] = []
        for _ in range(REPEATS):
            decoded += await _decode(client, model, prompts, api_key, batches)
        longest: list[int] = []
        for _ in range(REPEATS):
            for n in lengths:
                prompt = prompts.unique(n)
                misses.append((n, await _ttft(client, model, prompt, api_key)))
                hits.append(await _ttft(client, model, prompt, api_key))
                longest = prompt
        if engine_pool_tokens:
            # Drop ``longest`` from the engine's pool, then ask for it: the offload tier serves it.
            # The engine's reset where kvstack may call it; else other prompts push it out (on a
            # 1M-token pool, 128 of 8,192 tokens: 85 s here, and more than the DRAM tier may hold).
            dropped = (
                reset_path is not None
                and (await reset_cache(scraper, base_url, reset_path, auth_headers(api_key)))[0]
            )
            flushed = 0 if flush else engine_pool_tokens + 1
            while not dropped and flushed <= engine_pool_tokens:
                await _ttft(client, model, prompts.unique(lengths[-1]), api_key)
                flushed += lengths[-1]
            if dropped or flush:
                before = await _counted(scraper, metrics_urls, api_key, None, 0)
                seconds = await _ttft(client, model, longest, api_key)
                after = await _counted(scraper, metrics_urls, api_key, before, len(longest))
                sources = token_sources.by_source(before, after, one_request=True)
                fetch_note = dram_fetch_problem(sources, len(longest), align)
                if not fetch_note:
                    fetched.append((token_sources.DRAM, round(sources[token_sources.DRAM]), seconds))
            else:
                fetch_note = "the engine's reset did not drop it from the engine's pool"
    decode = fit_decode(decoded)
    source = (
        f"measured on the served layout: {len(misses)} unique prompts of {', '.join(map(str, lengths))} "
        f"tokens, each sent again"
        + (", one fetched back from the offload tier's DRAM" if fetched else "")
        + (f"; the DRAM fetch sample was discarded: {fetch_note}" if fetch_note else "")
        + (
            f"; decode: {', '.join(map(str, batches))} requests at once, {DECODE_TOKENS} tokens each"
            f" (x{REPEATS})"
            if decode is not None
            else "; decode not measured (fewer than two batch sizes)"
        )
    )
    costs = fit_costs(hits, misses, fetched, source)
    if decode is None:
        return costs
    return replace(costs, decode_fixed_s=decode[0], decode_per_seq_s=decode[1])


def dram_fetch_problem(sources: dict[str, float], prompt: int, align: int) -> str:
    """Why a request is no sample of the DRAM tier's fetch ("" when it is): the DRAM tier must have
    served it, nothing below DRAM any of it, and no more than one unit of ``align`` tokens recomputed."""
    if not sources:
        return "the counters do not say where its tokens came from"
    below = {
        t: v
        for t, v in sources.items()
        if t in (token_sources.DISK, token_sources.REMOTE, token_sources.OFFLOAD) and v > 0
    }
    shown = ", ".join(f"{token_sources.LABELS[t]} {v:,.0f}" for t, v in sources.items() if v > 0)
    if below or not sources.get(token_sources.DRAM):
        return f"the counters say DRAM did not serve it ({shown} of {prompt:,} tokens)"
    if sources.get(token_sources.RECOMPUTED, 0.0) > max(align, 1):
        return f"part of it was recomputed ({shown} of {prompt:,} tokens)"
    return ""


async def _counted(
    scraper: httpx.AsyncClient,
    urls: Sequence[str],
    api_key: str | None,
    before: MetricsSnapshot | None,
    prompt: int,
    wait_s: float = 2.0,
) -> MetricsSnapshot:
    """A scrape; after a request (``before`` given), once the engine has counted its ``prompt``
    tokens (engines update their counters just after the response), or after ``wait_s``."""
    snap = await scrape(scraper, urls, api_key)
    deadline = time.monotonic() + wait_s
    while before is not None and time.monotonic() < deadline:
        if sum(token_sources.by_source(before, snap).values()) >= prompt:
            break
        await asyncio.sleep(0.05)
        snap = await scrape(scraper, urls, api_key)
    return snap


def predicted_ttft(costs: ServedCosts, prompts: list[int], per_request: dict[str, list[int]]) -> list[float]:
    """Per request sent, the TTFT the costs predict for the sources the simulation gave it. A tier
    without its own fetch figure (the disk tier, whose files sit in the page cache here) is taken
    at DRAM's."""
    fetch = dict(costs.fetch_s)
    for tier in (token_sources.DISK, token_sources.REMOTE):
        fetch.setdefault(tier, fetch.get(token_sources.DRAM, 0.0))
    at = replace(costs, fetch_s=fetch, chunk_s=0.0)
    out = []
    for i, prompt in enumerate(prompts):
        engine = per_request.get(token_sources.ENGINE_CACHE, [0] * len(prompts))[i]
        tiers = {t: rows[i] for t, rows in per_request.items() if t != token_sources.ENGINE_CACHE}
        out.append(at.ttft(prompt, engine, tiers))
    return out


def summary(costs: ServedCosts, predicted: list[float], measured: list[float]) -> results.TtftCheck:
    from kvstack.planning.predict.served_ttft import percentiles

    p, m = percentiles(predicted), percentiles(measured)
    ratio = {
        k: (m[k] / p[k]) if p[k] and m[k] else None  # type: ignore[operator]
        for k in ("p50_s", "p90_s")
    }
    return results.TtftCheck(
        calibration=results.Costs.of(costs),
        predicted=results.Percentiles.model_validate(p),
        measured=results.Percentiles.model_validate(m),
        measured_over_predicted=results.Percentiles.model_validate(ratio),
    )
