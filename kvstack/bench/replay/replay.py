"""Replay a trace against one server: arrivals on the trace's clock, token prompts, per-request sources.

Requests go out in trace order at ``arrival_s`` (the trace's timestamps x --time-scale), at most
``concurrency`` in flight. With one in flight (the default) the counters are scraped after every
request, so each row says where its prompt tokens came from; with more, only the run's totals do.

Sources per request: clients/token_sources.py's one rule over the two scrapes around the request
(``one_request``: LMCache's L1 count is cleared of the prefix the engine held itself, so each tier's
tokens come from its own counter). Figures the rule derives rather than reads are collected in
``ReplayRun.derived``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from kvstack.bench.replay.prompts import BlockTokens, SentRequest
from kvstack.bench.schema import RequestRow
from kvstack.bench.stats import measured
from kvstack.clients import token_sources
from kvstack.clients.client import make_client
from kvstack.clients.metrics import MetricsSnapshot, scrape
from kvstack.clients.streaming import RequestResult, StreamClient
from kvstack.errors import KvstackError
from kvstack.validation.scoring import CHECKED_EXTRA_BODY, CHECKED_LOGPROBS


@dataclass
class ReplayRun:
    rows: list[RequestRow] = field(default_factory=list)
    first: MetricsSnapshot | None = None
    last: MetricsSnapshot | None = None
    started_at: float = 0.0
    derived: dict[str, str] = field(default_factory=dict)  # source -> how a row's figure was had
    # --check-correctness: the answers of the requests asked for their token ids, by request index.
    served: dict[int, RequestResult] = field(default_factory=dict)


def _row(
    layout: str, sent: SentRequest, res: RequestResult, started_at: float, sources: dict[str, float] | None
) -> RequestRow:
    src = sources or {}

    def get(key: str) -> float | None:
        return src.get(key, 0.0) if sources is not None else None

    return RequestRow(
        layout=layout,
        id=f"trace-{sent.line}",
        index=sent.index,
        round=0,
        group=sent.session,
        prompt_tokens=sent.prompt_tokens,
        expected_prefix_tokens=0,  # filled in by the session from the unbounded simulation
        **measured(res, started_at),
        recomputed_tokens=get(token_sources.RECOMPUTED),
        engine_cache_tokens=get(token_sources.ENGINE_CACHE),
        dram_tokens=get(token_sources.DRAM),
        disk_tokens=get(token_sources.DISK),
        remote_tokens=get(token_sources.REMOTE),
        offload_tokens=get(token_sources.OFFLOAD),
    )


async def replay(
    layout: str,
    base_url: str,
    metrics_urls: Sequence[str],
    model: str,
    sent: Sequence[SentRequest],
    blocks: BlockTokens,
    *,
    api_key: str | None = None,
    concurrency: int = 1,
    timeout_s: float = 300.0,
    check_alive: Callable[[], None] | None = None,
    on_row: Callable[[RequestRow], None] | None = None,
    run: ReplayRun | None = None,
    keep_ids: Collection[int] = (),
) -> ReplayRun:
    """Send ``sent`` on its schedule; rows land in ``run`` as they finish (kept if interrupted).
    The requests whose index is in ``keep_ids`` ask for their token ids and log-probabilities (as
    bench/correctness.py's checked requests do), and their answers are kept in ``run.served`` for
    --check-correctness."""
    run = run if run is not None else ReplayRun()
    per_request = concurrency == 1
    free = asyncio.Semaphore(concurrency)
    async with (
        StreamClient(base_url, concurrency) as client,
        make_client(base_url, max_connections=2) as scraper,
    ):
        run.first = run.last = await scrape(scraper, metrics_urls, api_key)
        run.started_at = time.time()
        t0 = time.perf_counter()

        async def one(req: SentRequest) -> None:
            try:
                try:
                    keep = req.index in keep_ids
                    res = await client.completion(
                        model,
                        blocks.prompt(req),
                        req.output_tokens,
                        api_key=api_key,
                        timeout_s=timeout_s,
                        extra_body=CHECKED_EXTRA_BODY if keep else None,
                        logprobs=CHECKED_LOGPROBS if keep else None,
                    )
                    if keep:
                        slim = res.model_copy()
                        slim.itl_s, slim.prompt_token_ids, slim.tokens, slim.top_logprobs = [], None, [], []
                        run.served[req.index] = slim
                except Exception as exc:  # a row, never an exception (as bench's runner)
                    res = RequestResult(
                        start_time=time.time(), error=f"client error: {type(exc).__name__}: {exc}"
                    )
                sources = None
                if per_request:
                    after = await scrape(scraper, metrics_urls, api_key)
                    assert run.last is not None
                    split = token_sources.sources(run.last, after, one_request=True)
                    sources = split.tokens
                    run.derived.update(split.derived)
                    run.last = after
                row = _row(layout, req, res, run.started_at, sources)
                run.rows.append(row)
                if on_row is not None:
                    on_row(row)
            finally:
                free.release()

        try:
            async with asyncio.TaskGroup() as tg:
                for req in sent:
                    delay = t0 + req.arrival_s - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    await free.acquire()
                    if check_alive is not None:
                        check_alive()  # a dead engine ends the replay with its error
                    tg.create_task(one(req))
        except BaseExceptionGroup as group:
            # The task group wraps what its body raised: the caller gets kvstack's error itself.
            raise _first_error(group) from None
        run.last = await scrape(scraper, metrics_urls, api_key)
    return run


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first KvstackError in ``group`` (nested groups searched), else the group."""
    for exc in group.exceptions:
        found = _first_error(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if isinstance(found, KvstackError):
            return found
    return group
