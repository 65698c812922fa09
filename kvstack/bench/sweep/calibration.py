"""The short calibration ``bench --sweep`` runs on each layout before its steps, where nothing else
gives the engine's costs (the plan has no prefill figure: the CPU platform's case, or a --url
server without a plan), and the ServedCalibration a predictor reads back from the sweep's result.

It is bench --trace's calibration (bench/replay/calibrate.py): misses at a few prompt lengths, each
sent again as a hit, decode at a few batch sizes and, on a layout kvstack knows has an offload tier
and whose engine can drop a prompt from its own pool, one DRAM fetch. Its prompts are token blocks
under negative hash ids, drawn from a seed of this calibration's own: no step of any sweep sends
them, so what the calibration stored in a tier that outlives the engine (the disk) serves no step
(docs/runs/2026-11-28-capacity-prediction.md: a disk tier holding the calibration's prompts served
a sweep's first step). Its misses go up to twice the sweep's longest prompt (from 1,024 tokens): the
prefill terms are fitted over the prompts the steps send, and the calibration stays short.
"""

from __future__ import annotations

import asyncio
import math
import random
import time

import httpx

from kvstack.bench.correctness import engine_of
from kvstack.bench.replay.calibrate import DECODE_TOKENS, LENGTHS, calibrate, calibration_lengths
from kvstack.bench.replay.prompts import BlockTokens, token_pool
from kvstack.bench.replay.results import Costs
from kvstack.bench.replay.sizes import engine_level
from kvstack.bench.sweep.schema import SweepCalibration, SweepResult
from kvstack.clients import quiet
from kvstack.clients.metrics import scrape_sync
from kvstack.clients.models import served_models
from kvstack.connectors.engines import ENGINE_SPECS
from kvstack.errors import KvstackError
from kvstack.planning.predict.plan_capacity import plan_costs
from kvstack.planning.predict.served_ttft import ServedCalibration, ServedCosts
from kvstack.serving.served_layout import ServedLayout

BLOCK_TOKENS = 64  # the calibration's prompt blocks (any size: each prompt's blocks are its own)


def needs_calibration(layout: ServedLayout) -> bool:
    """Whether the sweep calibrates ``layout``: its plan (if any) has no prefill figure."""
    return layout.plan is None or plan_costs(layout.plan) is None


def sweep_lengths(context: int, longest_prompt: int) -> list[int]:
    """The miss lengths: calibration_lengths up to twice ``longest_prompt`` (at least 1,024 tokens:
    two lengths), within the ``context``."""
    reach = max(1024, 2 * longest_prompt)
    upto = next((n for n in LENGTHS if n >= reach), LENGTHS[-1])
    return [n for n in calibration_lengths(context) if n <= upto] or calibration_lengths(context)


def calibrate_layout(
    layout: ServedLayout, model: str, api_key: str | None, longest_prompt: int
) -> SweepCalibration:
    """The calibration of ``layout`` (its failure recorded, not raised: the steps still run)."""
    started = time.monotonic()
    offload = bool(layout.plan.offload_tiers) if layout.plan is not None else None
    found = SweepCalibration(offload=offload)
    try:
        with quiet.hold(layout.base_url):  # the server's canary sends nothing while it measures
            costs = _calibrate(layout, model, api_key, longest_prompt, found)
    except (KvstackError, httpx.HTTPError, ValueError) as exc:
        note = exc.message if isinstance(exc, KvstackError) else f"{type(exc).__name__}: {exc}"
        found.seconds, found.note = time.monotonic() - started, f"failed: {note}"
        return found
    found.costs, found.seconds = Costs.of(costs), time.monotonic() - started
    found.note = "" if offload is not None else "the layout's tiers are unknown: no fetch measured"
    return found


def _calibrate(
    layout: ServedLayout, model: str, api_key: str | None, longest_prompt: int, found: SweepCalibration
) -> ServedCosts:
    """The costs; ``found`` gets the engine's pool and name as its counters give them."""
    plan = layout.plan
    offload = bool(found.offload)
    card = served_models(layout.base_url, api_key)[0]
    context = int(card.get("max_model_len") or 0) or (plan.model.max_model_len if plan else 0) or 2048
    snap = scrape_sync(layout.metrics_urls[:1], api_key)
    level = engine_level(snap)
    pool = level.unit_tokens * level.nominal_blocks if level is not None else None
    if level is not None:
        found.pool_tokens, found.block_tokens = pool, level.unit_tokens
    found.engine = engine_of(plan, snap)
    chunk = plan.cache.chunk_size if plan is not None and plan.cache.chunk_size else 1
    align = math.lcm(level.unit_tokens if level is not None else 1, chunk)
    spec = ENGINE_SPECS.get(found.engine)
    reset = spec.reset_path if spec is not None and spec.reset_keeps_offload else None
    model_dir = plan.model.path if plan is not None else None
    tokens = token_pool(layout.base_url, model, api_key, model_dir)
    blocks = BlockTokens(tokens, BLOCK_TOKENS, random.SystemRandom().randrange(1 << 30))
    max_prompt = context - DECODE_TOKENS
    return asyncio.run(
        calibrate(
            layout.base_url,
            model,
            blocks,
            api_key=api_key,
            max_prompt=max_prompt,
            engine_pool_tokens=pool if offload and reset else None,
            metrics_urls=layout.metrics_urls,
            align=align,
            reset_path=reset,
            lengths=sweep_lengths(max_prompt, longest_prompt),
            flush=False,
        )
    )


def sweep_calibration(result: SweepResult, layout: str) -> ServedCalibration | None:
    """``layout``'s calibration in ``result`` as a ServedCalibration (None: not calibrated, or its
    calibration failed). A layout without an offload tier (or whose tiers kvstack did not know)
    gives the plain costs; one with gives the offload costs, beside the plain costs of the sweep's
    first calibrated layout without (its own where the sweep calibrated none)."""
    by_name = {lay.name: lay.calibration for lay in result.layouts}
    own = by_name.get(layout)
    if own is None or own.costs is None:
        return None
    costs = own.costs.served()
    source = f"kvstack bench --sweep: calibrated on {layout} before its steps"
    if not own.offload:
        return ServedCalibration(plain=costs, plain_layout=layout, source=source)
    plains = [(n, c.costs) for n, c in by_name.items() if c is not None and c.costs and c.offload is False]
    plain = plains[0] if plains else (layout, own.costs)
    return ServedCalibration(
        plain=plain[1].served(), offload=costs, plain_layout=plain[0], offload_layout=layout, source=source
    )
