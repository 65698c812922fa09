"""``kvstack bench --trace FILE``: replay a Mooncake trace per layout, then predicted vs measured.

The slice: requests from ``--start`` on, a session sample (``--session-sample``), the first
``--max-requests`` of what is kept, blocks scaled to ``--block-tokens``. The first layout decides
what is sent (its context, KV block and LMCache chunk); every layout gets the same prompts.
For each layout the replay's requests are simulated on the cache sizes its servers report, and
the table sets each tier's predicted share of prompt tokens next to the measured one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, TypeVar

from pydantic import BaseModel

from kvstack.bench.correctness import Answer, cached_first, check_replayed, engine_of
from kvstack.bench.replay.calibrate import calibrate, predicted_ttft, summary
from kvstack.bench.replay.predict import TierPrediction, comparison, predict
from kvstack.bench.replay.prompts import BlockTokens, ReplayShape, SentRequest, plan_requests, token_pool
from kvstack.bench.replay.replay import ReplayRun, replay
from kvstack.bench.replay.results import LayoutComparison, TraceReplay, TraceSlice, TtftCheck
from kvstack.bench.replay.sizes import Hierarchy, engine_level, lmcache_hierarchy, lmcache_levels
from kvstack.bench.replay.target import url_layout
from kvstack.bench.request import BenchRequest
from kvstack.bench.schema import BenchResult, CacheStats, CorrectnessResult, LayoutResult, RequestRow
from kvstack.bench.stats import cache_stats, summarize
from kvstack.clients import metrics as m
from kvstack.clients import quiet, token_sources
from kvstack.clients.lmcache_status import LMCacheStatus, cache_server_status
from kvstack.clients.metrics import scrape_sync
from kvstack.clients.models import served_models
from kvstack.connectors.engines import ENGINE_SPECS
from kvstack.errors import InputError, Interrupted, KvstackError
from kvstack.jsonvalue import JsonObject
from kvstack.planning.predict.capacity import simulate_hierarchy
from kvstack.redact import redact_url
from kvstack.serving.served_layout import ServedLayout, StartLayout
from kvstack.traces.mooncake import TraceRow, read_trace
from kvstack.traces.sample import parse_ratio, sample_sessions, scale_blocks, session_key, with_requests

UNBOUNDED = 1 << 40
OFFLOADED = (token_sources.DRAM, token_sources.DISK, token_sources.REMOTE, token_sources.OFFLOAD)


Doc = TypeVar("Doc", bound=BaseModel)


@dataclass(frozen=True)
class ReplayRequest:
    """How a trace is replayed, made from flags already checked (bench's, tune's)."""

    path: Path
    start: int = 0
    max_requests: int | None = None
    session_sample: float | None = None
    block_tokens: int = 64
    time_scale: float = 1.0
    max_output_tokens: int = 16
    concurrency: int = 1
    seed: int = 0
    check_correctness: int = 0  # replayed requests whose answers a recompute judges

    def record(self, doc: type[Doc], **more: object) -> Doc:
        """A results model with this request's fields it names (under the same names) and ``more``."""
        fields = {name: value for name, value in dataclasses.asdict(self).items() if name in doc.model_fields}
        return doc.model_validate({**fields, **more})


def replay_of(request: BenchRequest) -> ReplayRequest:
    """How ``bench --trace`` replays the trace (the session sample's ratio read here)."""
    assert request.trace is not None
    sample = request.session_sample
    return ReplayRequest(
        path=request.trace,
        start=request.start,
        max_requests=request.max_requests,
        session_sample=parse_ratio(sample) if sample else None,
        block_tokens=request.block_tokens,
        time_scale=request.time_scale,
        max_output_tokens=request.max_output_tokens,
        concurrency=request.concurrency or 1,
        seed=request.seed,
        check_correctness=request.check_correctness,
    )


@dataclass
class Shared:
    """What the first layout decided for every layout."""

    sent: list[SentRequest] = field(default_factory=list)
    blocks: BlockTokens | None = None
    shape: ReplayShape | None = None
    notes: list[str] = field(default_factory=list)
    _ideal: list[int] | None = field(default=None, repr=False, compare=False)

    def adopt(self, decided: Shared) -> None:
        """Take what the first layout decided (``_decide``)."""
        self.sent, self.blocks, self.shape = decided.sent, decided.blocks, decided.shape
        self.notes = decided.notes
        self._ideal = None

    def ideal(self) -> list[int]:
        """Per request sent (by index), the prompt tokens an unbounded prefix cache holds when it is
        sent: simulated once, for every layout."""
        if self._ideal is None:
            assert self.shape is not None
            self._ideal = ideal_prefixes(self.sent, self.shape.block_tokens)
        return self._ideal

    def stepped(self, multiple: float, seed: int) -> Shared:
        """What a sweep's step sends: the same requests with their arrival times divided by
        ``multiple`` (the trace's rate times it), and every block's tokens drawn anew from ``seed``,
        so that the step shares prefixes as the trace does and nothing with an earlier step."""
        assert self.blocks is not None and multiple > 0
        step = self.on_clock([s.arrival_s / multiple for s in self.sent])
        step.blocks = BlockTokens(self.blocks.pool, self.blocks.block_tokens, seed)
        return step

    def on_clock(self, arrivals: Sequence[float]) -> Shared:
        """The same requests and blocks, sent at ``arrivals`` (seconds after the first, per request)."""
        sent = [dataclasses.replace(s, arrival_s=a) for s, a in zip(self.sent, arrivals, strict=True)]
        moved = Shared(sent=sent, blocks=self.blocks, shape=self.shape, notes=self.notes)
        moved._ideal = self._ideal  # the same hash ids: what an unbounded cache holds is unchanged
        return moved

    def unbounded_hit_ratio(self) -> float | None:
        """The share of the prompt tokens sent an unbounded prefix cache serves."""
        total = sum(s.prompt_tokens for s in self.sent)
        return sum(self.ideal()) / total if total else None


class ReplayOutcome(NamedTuple):
    """One layout's replay: its result, its rows, and predicted vs measured."""

    result: LayoutResult
    rows: list[RequestRow]
    compared: LayoutComparison


def load_slice(args: ReplayRequest) -> tuple[list[TraceRow], TraceSlice]:
    """The trace rows to replay (scaled), and what was taken."""
    trace = read_trace(args.path, start=args.start)
    rows = trace.requests
    if args.session_sample is not None:
        rows = sample_sessions(rows, args.session_sample, seed=args.seed)
        if not rows:
            raise InputError(
                f"the session sample {args.session_sample:g} keeps no request of {args.path}",
                hint="raise --session-sample",
            )
    if args.max_requests is not None:
        rows = rows[: args.max_requests]
    scaled = scale_blocks(with_requests(trace, rows), args.block_tokens)
    info = args.record(
        TraceSlice, source=str(args.path), trace_block_tokens=trace.block_tokens, rows_taken=len(rows)
    )
    return scaled.requests, info


def _status(layout: ServedLayout, api_key: str | None) -> LMCacheStatus | None:
    candidates = [layout.cache_server_url] if layout.cache_server_url else []
    candidates += [u.removesuffix("/metrics") for u in layout.metrics_urls[1:]]
    for url in candidates:
        if url:
            status = cache_server_status(url, api_key)
            if status is not None:
                return status
    return None


def _decide(
    layout: ServedLayout, rows: list[TraceRow], args: ReplayRequest, api_key: str | None, model: str
) -> Shared:
    card = served_models(layout.base_url, api_key)[0]
    context = int(card.get("max_model_len") or 0) or (layout.plan.model.max_model_len if layout.plan else 0)
    if not context:
        raise InputError(
            f"{redact_url(layout.base_url)}/v1/models says no max_model_len", hint="use vLLM or SGLang"
        )
    level = engine_level(scrape_sync(layout.metrics_urls[:1], api_key))
    block = level.unit_tokens if level else 1
    status = _status(layout, api_key)
    chunk = (status.chunk_size or 1) if status else (layout.plan.cache.chunk_size if layout.plan else 1)
    align = math.lcm(block, chunk)
    shape = ReplayShape(
        args.block_tokens, align, context - args.max_output_tokens, args.max_output_tokens, args.time_scale
    )
    sent, notes = plan_requests(rows, shape, session_key)
    if not sent:
        raise InputError("no trace row is long enough to send", hint="raise --block-tokens")
    model_dir = layout.plan.model.path if layout.plan else None
    pool = token_pool(layout.base_url, model, api_key, model_dir)
    return Shared(sent=sent, blocks=BlockTokens(pool, args.block_tokens, args.seed), shape=shape, notes=notes)


def hierarchy_of(layout: ServedLayout, run: ReplayRun, api_key: str | None) -> Hierarchy:
    assert run.first is not None
    engine = engine_level(run.first)
    status = _status(layout, api_key)
    if status is None:
        return Hierarchy(levels=[engine] if engine is not None else [])
    plan = layout.plan
    per_token = plan.cache.kv_bytes_per_token if plan else status.bytes_per_token()
    adapters = _adapters(layout, status)
    disk = plan.tier("disk") if plan else None
    lm, notes = lmcache_levels(status, per_token, adapters, disk.size_bytes if disk else None)
    return lmcache_hierarchy(engine, lm, notes)


def _adapters(layout: ServedLayout, status: LMCacheStatus) -> dict[str, str]:
    if layout.plan is not None:
        return {t.kind: t.kind for t in layout.plan.offload_tiers if t.kind in ("disk", "remote")}
    return status.adapter_tiers()


def measured_tokens(run: ReplayRun, per_request: bool) -> token_sources.MeasuredSources:
    """Prompt tokens by source over the replay: the rows' own (one request per scrape) summed, else
    the run's counters, by clients/token_sources.py's one rule either way."""
    if per_request and all(r.recomputed_tokens is not None for r in run.rows):
        keys = {
            token_sources.RECOMPUTED: "recomputed_tokens",
            token_sources.ENGINE_CACHE: "engine_cache_tokens",
            token_sources.DRAM: "dram_tokens",
            token_sources.DISK: "disk_tokens",
            token_sources.REMOTE: "remote_tokens",
            token_sources.OFFLOAD: "offload_tokens",
        }
        tokens = {k: float(sum(getattr(r, f) or 0.0 for r in run.rows)) for k, f in keys.items()}
        return token_sources.MeasuredSources(tokens, dict(run.derived))
    assert run.first is not None and run.last is not None
    return token_sources.sources(run.first, run.last)


def unknown_tiers(
    layout: ServedLayout, hierarchy: Hierarchy, measured: token_sources.MeasuredSources, connector: bool
) -> str | None:
    """Why the replay cannot be predicted: the server offloads to tiers whose sizes are not known."""
    levels = {lv.tier for lv in hierarchy.levels}
    offloaded = {t: v for t, v in measured.tokens.items() if t in OFFLOADED and v > 0}
    missing = [
        t
        for t in offloaded
        if t not in levels and (t != token_sources.OFFLOAD or levels <= {token_sources.ENGINE_CACHE})
    ]
    if not missing and not (connector and levels <= {token_sources.ENGINE_CACHE}):
        return None
    served = (
        ", ".join(f"{token_sources.LABELS[t]} {v:,.0f} tokens" for t, v in offloaded.items())
        or "a KV connector"
    )
    head = (
        f"{layout.name} serves prompt tokens from offload tiers ({served}) whose sizes kvstack cannot read: "
    )
    if layout.cache_server_url:
        return head + f"its cache server {redact_url(layout.cache_server_url)} reports none for them"
    if layout.plan is not None:
        return head + f"kvstack sizes LMCache's cache server's tiers, not {layout.plan.transfer.connector}'s"
    return (
        head + "no --lmcache URL names its cache server and no kvstack serve run serves it "
        "(give --lmcache URL or the serve run's --run-dir)"
    )


def _may_hit(shared: Shared, args: ReplayRequest) -> set[int]:
    """--check-correctness: the requests a cache can serve any of (an unbounded one would)."""
    if not args.check_correctness:
        return set()
    ideal = shared.ideal()
    return {s.index for s in shared.sent if ideal[s.index] > 0}


def ideal_prefixes(sent: list[SentRequest], block_tokens: int) -> list[int]:
    """Per request, the prompt tokens an unbounded prefix cache holds when it is sent."""
    result = simulate_hierarchy([s.as_trace() for s in sent], [UNBOUNDED], block_tokens=block_tokens)
    return result.per_request[0]


def run_layout_replay(
    layout: ServedLayout,
    rows: list[TraceRow],
    args: ReplayRequest,
    shared: Shared,
    *,
    model: str,
    api_key: str | None,
    timeout_s: float,
    on_row: Callable[[RequestRow], None] | None = None,
    ttft_check: bool = True,
) -> ReplayOutcome:
    """Replay ``shared.sent`` (decided by the first layout: ``_decide``) against ``layout``; the
    result, its rows and the predicted vs measured comparison. ``ttft_check``: calibrate the layout
    after the replay and set the TTFT model's prediction beside the measured (bench); tune predicts
    with its own calibration and skips it."""
    with quiet.hold(layout.base_url):  # the server's canary sends nothing while the replay measures
        model = layout.served_model or model
        decide_once(layout, rows, args, shared, api_key, model)
        # The replay itself: its run, the layout's result and its rows (each with the prefix an
        # unbounded cache would hold).
        kept: list[tuple[LayoutResult, list[RequestRow]]] = []
        run = replay_step(
            layout, args, shared, model, api_key, timeout_s, lambda r, rs: kept.append((r, rs)), on_row
        )
        result, rows_out = kept[0]
        if args.check_correctness:
            result.correctness = _check_answers(
                layout, run, rows_out, shared, args.check_correctness, model, api_key, timeout_s
            )
        compared = _compare(layout, run, rows_out, args, shared, model, api_key, ttft_check)
    return ReplayOutcome(result, rows_out, compared)


def decide_once(
    layout: ServedLayout,
    rows: list[TraceRow],
    args: ReplayRequest,
    shared: Shared,
    api_key: str | None,
    model: str,
) -> None:
    """What every layout is sent, decided by the first one replayed (``shared`` kept after that)."""
    if shared.blocks is None:
        shared.adopt(_decide(layout, rows, args, api_key, model))


def replay_step(
    layout: ServedLayout,
    args: ReplayRequest,
    shared: Shared,
    model: str,
    api_key: str | None,
    timeout_s: float,
    record: Callable[[LayoutResult, list[RequestRow]], None],
    on_row: Callable[[RequestRow], None] | None = None,
) -> ReplayRun:
    """Replay ``shared.sent`` on ``layout`` and ``record`` its result and rows, complete or cut
    short (before the error it ended with propagates)."""
    assert shared.blocks is not None
    run = ReplayRun()
    aborted: str | None = "interrupted"
    try:
        asyncio.run(
            replay(
                layout.name, layout.base_url, layout.metrics_urls, model, shared.sent, shared.blocks,
                api_key=api_key, concurrency=args.concurrency, timeout_s=timeout_s,
                check_alive=layout.check_alive, on_row=on_row, run=run,
                keep_ids=_may_hit(shared, args),
            )
        )  # fmt: skip
        aborted = None
    except KvstackError as exc:
        aborted = exc.message
        raise
    except KeyboardInterrupt as exc:
        raise Interrupted("interrupted: the rows measured so far are kept in the report") from exc
    finally:
        record(*_layout_result(layout, run, shared, aborted))
    return run


def _with_ideal(row: RequestRow, tokens: int) -> RequestRow:
    """``row`` with the prefix tokens an ideal cache would have served it."""
    out = row.model_copy()
    out.expected_prefix_tokens = tokens
    return out


def _layout_result(
    layout: ServedLayout, run: ReplayRun, shared: Shared, aborted: str | None
) -> tuple[LayoutResult, list[RequestRow]]:
    ideal = shared.ideal()
    rows_out = sorted((_with_ideal(r, ideal[r.index]) for r in run.rows), key=lambda r: r.index)
    first, last = run.first, run.last
    result = LayoutResult(
        name=layout.name,
        base_url=redact_url(layout.base_url),
        metrics_urls=[redact_url(u) for u in layout.metrics_urls],
        started_at=run.started_at,
        complete=aborted is None,
        aborted=aborted,
        summary=summarize(rows_out),
        cache=cache_stats(first, last) if first is not None and last is not None else CacheStats(),
    )
    return result, rows_out


def _compare(
    layout: ServedLayout,
    run: ReplayRun,
    rows_out: list[RequestRow],
    args: ReplayRequest,
    shared: Shared,
    model: str,
    api_key: str | None,
    ttft_check: bool,
) -> LayoutComparison:
    """Predicted vs measured prompt tokens per tier (and with ``ttft_check``, TTFT) for the replay."""
    done = [s for s in shared.sent if s.index in {r.index for r in rows_out}]
    hierarchy = hierarchy_of(layout, run, api_key)
    measured = measured_tokens(run, args.concurrency == 1)
    assert run.first is not None and run.last is not None
    connector = (m.increase(run.first, run.last, m.VLLM_EXTERNAL_QUERIES) or 0.0) > 0
    why_not = unknown_tiers(layout, hierarchy, measured, connector)
    prediction = predict(layout.name, done, hierarchy, args.block_tokens)
    ttft: TtftCheck | None = None
    if ttft_check:
        # vLLM's reset keeps the offload tiers; SGLang's /flush_cache would empty HiCache's host pool.
        own = ENGINE_SPECS.get(engine_of(layout.plan, run.first))
        reset = own.reset_path if own is not None and own.reset_keeps_offload else None
        ttft = _ttft_check(layout, shared, hierarchy, prediction, rows_out, model, api_key, reset, why_not)
    one = args.concurrency == 1
    measured_from = "each request's counters (one in flight)" if one else "the replay's counters, in total"
    return comparison(prediction, measured, measured_from, why_not, ttft)


def _check_answers(
    layout: ServedLayout,
    run: ReplayRun,
    rows: list[RequestRow],
    shared: Shared,
    k: int,
    model: str,
    api_key: str | None,
    timeout_s: float,
) -> CorrectnessResult:
    """--check-correctness: the ``k`` replayed answers the caches served most of, judged by recompute."""
    assert shared.blocks is not None
    by_index = {s.index: s for s in shared.sent}
    answers = [
        Answer(
            r.index,
            shared.blocks.prompt(by_index[r.index]),
            run.served[r.index],
            by_index[r.index].output_tokens,
        )
        for r in cached_first([r for r in rows if r.index in run.served], k)
    ]
    engine = engine_of(layout.plan, run.first)
    blocks = shared.blocks
    return asyncio.run(
        check_replayed(
            layout.base_url, api_key, engine, model, answers, blocks.pool, blocks.block_tokens, timeout_s,
            f"{layout.name}'s caches",
        )
    )  # fmt: skip


def _ttft_check(
    layout: ServedLayout,
    shared: Shared,
    hierarchy: Hierarchy,
    prediction: TierPrediction,
    rows: list[RequestRow],
    model: str,
    api_key: str | None,
    reset_path: str | None,
    why_not: str | None = None,
) -> TtftCheck:
    """The plan's TTFT model, with costs calibrated against this layout, on the requests sent,
    next to what they measured (no prediction where ``why_not`` says the tiers are unknown)."""
    assert shared.blocks is not None and shared.shape is not None
    engine = next((lv for lv in hierarchy.levels if lv.tier == token_sources.ENGINE_CACHE), None)
    offload = any(lv.tier != token_sources.ENGINE_CACHE for lv in hierarchy.levels)
    pool = engine.unit_tokens * engine.nominal_blocks if engine is not None else None
    costs = asyncio.run(
        calibrate(
            layout.base_url,
            model,
            shared.blocks,
            api_key=api_key,
            max_prompt=shared.shape.max_prompt_tokens,
            engine_pool_tokens=pool if offload else None,
            metrics_urls=layout.metrics_urls,
            align=shared.shape.align,
            reset_path=reset_path,
        )
    )
    prompts = [s.prompt_tokens for s in shared.sent if s.index in {r.index for r in rows}]
    predicted = [] if why_not else predicted_ttft(costs, prompts, prediction.per_request)
    measured = [r.ttft_s for r in rows if r.ok and r.ttft_s is not None]
    return summary(costs, predicted, measured)


def run_trace(
    args: ReplayRequest,
    sliced: tuple[list[TraceRow], TraceSlice],
    *,
    url: str | None,
    names: list[str],
    start_layout: StartLayout | None,
    metrics_urls: list[str],
    model: str,
    api_key: str | None,
    timeout_s: float,
    config: JsonObject,
    environment: JsonObject,
    lmcache: str | None = None,
    run_dir: Path | None = None,
) -> tuple[BenchResult, KvstackError | None]:
    """Replay per layout the slice ``load_slice(args)`` read (``args`` checked); the result holds
    whatever was measured, the error (if any) is returned."""
    rows, info = sliced
    shared = Shared()
    done: list[ReplayOutcome] = []
    failure: KvstackError | None = None
    target_notes: list[str] = []

    def one(layout: ServedLayout) -> None:
        done.append(
            run_layout_replay(layout, rows, args, shared, model=model, api_key=api_key, timeout_s=timeout_s)
        )

    try:
        if url is not None:
            layout, where = url_layout(url, metrics_urls, lmcache, run_dir)
            target_notes += where
            one(layout)
        else:
            assert start_layout is not None
            for name in names:
                with start_layout(name) as layout:
                    one(layout)
    except KvstackError as exc:
        failure = exc
    compared = [d.compared for d in done]
    trace = TraceReplay(
        **info.model_dump(),
        requests_sent=len(shared.sent),
        prompt_tokens=sum(s.prompt_tokens for s in shared.sent),
        align_tokens=shared.shape.align if shared.shape else None,
        notes=[
            *target_notes,
            *shared.notes,
            *(f"{c.layout}: no prediction: {c.no_prediction}" for c in compared if c.no_prediction),
        ],
        unbounded_hit_ratio=shared.unbounded_hit_ratio(),
        layouts=compared,
    ).document()
    result = BenchResult(
        config=config,
        environment=environment,
        workload={"name": "trace", "spec": trace},
        layouts=[d.result for d in done],
        requests=[r for d in done for r in d.rows],
        trace=trace,
    )
    return result, failure
