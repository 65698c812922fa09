"""Two scrapes -> one window: counter rates, histogram percentiles, prompt tokens by source, warnings.

Everything here is arithmetic on what sources.py collected; nothing is scraped or printed.
A counter that went down between the scrapes (the server restarted) counts from zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kvstack.clients import metrics as m
from kvstack.clients import token_sources
from kvstack.clients.metrics import MetricsSnapshot
from kvstack.connectors.engines import ENGINE_SPECS, VLLM
from kvstack.redact import redact_url
from kvstack.top.canary import canary_view, canary_warnings
from kvstack.top.capacity import MeasuredCapacity
from kvstack.top.snapshot import (
    AdapterView,
    CapacityView,
    DiskView,
    LmcacheView,
    RemoteView,
    ServerView,
    SourceShare,
    TopSnapshot,
)
from kvstack.top.sources import RedisStats, Scrape
from kvstack.top.targets import Targets

LMCACHE_MP_PREFIX = "lmcache_mp_"
TIER_NAMES = {"cpu": "DRAM tier", "disk": "disk tier", "remote": "remote tier"}


def counter_delta(before: MetricsSnapshot, after: MetricsSnapshot, name: str, **labels: str) -> float | None:
    """The counter's change; None where neither scrape has it; its new value after a reset."""
    return token_sources.snapshot_accessors(before, after)[0](name, **labels)


def bucket_deltas(before: MetricsSnapshot, after: MetricsSnapshot, name: str) -> list[tuple[float, float]]:
    """A histogram's cumulative bucket counts gained in the window by ``le``, summed over series;
    a series that was reset (its counts went down) counts from zero."""
    Series = tuple[str, tuple[tuple[str, str], ...]]

    def series(snap: MetricsSnapshot) -> dict[Series, dict[float, float]]:
        out: dict[Series, dict[float, float]] = {}
        for s in snap.matching(name + "_bucket"):
            le = s.labels.get("le")
            if le is None:
                continue
            bound = math.inf if le in ("+Inf", "Inf", "inf") else float(le)
            buckets = out.setdefault(m.series_key(s, without="le"), {})
            buckets[bound] = buckets.get(bound, 0.0) + s.value
        return out

    earlier = series(before)
    gained: dict[float, float] = {}
    for key, buckets in series(after).items():
        old = earlier.get(key, {})
        if sum(buckets.values()) < sum(old.values()):  # reset: the window is everything since
            old = {}
        for le, count in buckets.items():
            gained[le] = gained.get(le, 0.0) + count - old.get(le, 0.0)
    return sorted(gained.items())


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile: linear within the bucket holding rank ``q * count``.

    ``buckets`` are (upper bound, cumulative count) sorted by bound, the last one +Inf. A rank in
    the +Inf bucket answers the highest finite bound; no observations answer None.
    """
    if not 0 <= q <= 1:
        raise ValueError(f"quantile must be within 0..1, not {q}")
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank and count > below:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * (rank - below) / (count - below)
        if not math.isinf(bound):
            lower = bound
        below = count
    return lower


def _rate(value: float | None, window_s: float) -> float | None:
    return None if value is None or window_s <= 0 else value / window_s


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or den is None or den <= 0 else num / den


def _down(snap: MetricsSnapshot) -> str | None:
    if snap.errors and not snap.samples:
        return snap.errors[0]
    return None


SOURCE_LABEL = "kvstack_source"


def _from(url: str, snap: MetricsSnapshot) -> MetricsSnapshot:
    """``snap`` with every series labelled by the server it came from."""
    samples = [m.Sample(s.name, {**s.labels, SOURCE_LABEL: url}, s.value) for s in snap.samples]
    return MetricsSnapshot(samples, list(snap.sources), list(snap.errors))


def with_lmcache(engine: MetricsSnapshot, lmcache: MetricsSnapshot) -> MetricsSnapshot:
    """The engine's samples and the cache server's lmcache_mp_* ones, each counted once."""
    own = [s for s in engine.samples if not s.name.startswith(LMCACHE_MP_PREFIX)]
    theirs = [s for s in lmcache.samples if s.name.startswith(LMCACHE_MP_PREFIX)]
    return MetricsSnapshot([*own, *theirs], [*engine.sources, *lmcache.sources], list(engine.errors))


def server_view(
    url: str,
    before: MetricsSnapshot,
    after: MetricsSnapshot,
    lm: tuple[MetricsSnapshot, MetricsSnapshot] | None,
    window_s: float,
) -> ServerView:
    url = redact_url(url)  # a URL may carry user:password@
    error = _down(after)
    if error is not None:
        return ServerView(url=url, up=False, error=error)
    engine = after.engine
    series = ENGINE_SPECS.get(engine or "", VLLM).metrics  # vLLM's where no namespace shows
    gauges = ServerView(
        url=url,
        up=True,
        engine=engine,
        running=after.get(series.running),
        waiting=after.get(series.waiting),
        kv_usage=after.get(series.kv_usage),
    )
    if not before.samples:
        # No scrape to start the window from (the server was not answering then): counting from
        # zero would show totals since start as this window's. Gauges only, until the next one.
        return gauges
    ttft = bucket_deltas(before, after, series.ttft)
    prompt = counter_delta(before, after, series.prompt_tokens)
    # The engine's counters say recomputed / engine cache / offloaded; LMCache's which tier.
    eb, ea = (with_lmcache(before, lm[0]), with_lmcache(after, lm[1])) if lm else (before, after)
    split = token_sources.sources(eb, ea)
    sources = split.tokens
    total = sum(sources.values())
    # gauges was built just above: the window's figures are set on it
    gauges.requests = ttft[-1][1] if ttft else None
    gauges.ttft_p50_s = histogram_quantile(0.5, ttft)
    gauges.ttft_p90_s = histogram_quantile(0.9, ttft)
    gauges.prompt_tokens = prompt
    gauges.prompt_tokens_per_s = _rate(prompt, window_s)
    gauges.sources = {
        k: SourceShare(tokens=v, share=_ratio(v, total), per_s=v / window_s if window_s > 0 else 0.0)
        for k, v in sources.items()
    }
    gauges.derived = split.derived
    return gauges


def lmcache_view(url: str, before: MetricsSnapshot, after: MetricsSnapshot, window_s: float) -> LmcacheView:
    url = redact_url(url)
    error = _down(after)
    if error is not None:
        return LmcacheView(url=url, up=False, error=error)
    if not before.samples:  # no window to count over yet (see server_view)
        return LmcacheView(
            url=url,
            up=True,
            l1_hit_tokens_total=zero_if_up(after.get(m.LMCACHE_MP_L1_HIT_TOKENS)),
            l2_hit_tokens_total=zero_if_up(after.get(m.LMCACHE_MP_L2_HIT_TOKENS)),
            l1_usage_bytes=after.get(m.LMCACHE_MP_L1_USAGE),
        )
    delta, label_values = token_sources.snapshot_accessors(before, after)
    l1 = delta(m.LMCACHE_MP_L1_HIT_TOKENS)
    l2 = delta(m.LMCACHE_MP_L2_HIT_TOKENS)
    lookups = delta(m.LMCACHE_MP_REQUESTED_TOKENS)
    usage = after.get(m.LMCACHE_MP_L1_USAGE)
    ratio = after.get(m.LMCACHE_MP_L1_USAGE_RATIO)
    names = sorted(
        {*label_values(m.LMCACHE_MP_L2_USAGE, "l2_name"), *label_values(m.LMCACHE_MP_L2_LOADS, "l2_name")}
        | set(label_values(m.LMCACHE_MP_L2_STORES, "l2_name"))
    )
    adapters = [
        AdapterView(
            name=n,
            tier=token_sources.adapter_tier(n),
            loads=delta(m.LMCACHE_MP_L2_LOADS, l2_name=n),
            loads_total=after.get(m.LMCACHE_MP_L2_LOADS, l2_name=n),
            stores=delta(m.LMCACHE_MP_L2_STORES, l2_name=n),
            stores_total=after.get(m.LMCACHE_MP_L2_STORES, l2_name=n),
            usage_bytes=after.get(m.LMCACHE_MP_L2_USAGE, l2_name=n),
            evicted_chunks=after.get(m.LMCACHE_MP_L2_EVICTED, l2_name=n),
        )
        for n in names
    ]
    # Counters appear with the first event: a server that has served nothing yet shows none.
    return LmcacheView(
        url=url,
        up=True,
        lookup_tokens=zero_if_up(lookups),
        l1_hit_tokens=zero_if_up(l1),
        l1_hit_tokens_per_s=_rate(zero_if_up(l1), window_s),
        l1_hit_tokens_total=zero_if_up(after.get(m.LMCACHE_MP_L1_HIT_TOKENS)),
        l2_hit_tokens=zero_if_up(l2),
        l2_hit_tokens_per_s=_rate(zero_if_up(l2), window_s),
        l2_hit_tokens_total=zero_if_up(after.get(m.LMCACHE_MP_L2_HIT_TOKENS)),
        hit_ratio=_ratio((l1 or 0.0) + (l2 or 0.0), lookups),
        l1_usage_bytes=usage,
        l1_size_bytes=usage / ratio if usage is not None and ratio else None,
        l1_evicted_chunks=after.get(m.LMCACHE_MP_L1_EVICTED),
        adapters=adapters,
    )


def zero_if_up(value: float | None) -> float:
    return value if value is not None else 0.0


def _sub(a: int | None, b: int | None) -> int | None:
    if a is None or b is None:
        return None
    return a - b if a >= b else a


def _plus(a: int | None, b: int) -> int | None:
    return None if a is None else a + b


def remote_view(url: str, before: RedisStats | None, after: RedisStats) -> RemoteView:
    if not after.up:
        return RemoteView(url=url, up=False, error=after.error)
    prev = before if before is not None and before.up else None
    # kvstack's own read of the records after the previous INFO is in this window: taken out.
    hits = _sub(after.keyspace_hits, _plus(prev.keyspace_hits, prev.own_hits) if prev else None)
    misses = _sub(after.keyspace_misses, _plus(prev.keyspace_misses, prev.own_misses) if prev else None)
    total_h, total_m = after.keyspace_hits, after.keyspace_misses
    return RemoteView(
        url=url,
        up=True,
        used_memory_bytes=after.used_memory,
        maxmemory_bytes=after.maxmemory,
        keys=after.keys,
        evicted_keys=_sub(after.evicted_keys, prev.evicted_keys if prev else None),
        evicted_keys_total=after.evicted_keys,
        hit_ratio=_ratio(hits, None if hits is None or misses is None else hits + misses),
        hit_ratio_total=_ratio(total_h, None if total_h is None or total_m is None else total_h + total_m),
        live_layouts=after.live_layouts,
    )


def _fmt_tokens(n: float) -> str:
    return f"{n:,.0f}"


def _lmcache_warnings(lm: LmcacheView, targets: Targets, w: str, where: str) -> list[str]:
    if not lm.up:
        return [f"LMCache cache server {lm.url} is not answering ({lm.error}): the engine recomputes"]
    if (lm.lookup_tokens or 0) <= 0:
        return []
    looked = _fmt_tokens(lm.lookup_tokens or 0)
    if (lm.l1_hit_tokens or 0) + (lm.l2_hit_tokens or 0) <= 0:
        return [
            f"LMCache{where} served 0 of {looked} tokens looked up in the last {w}: every tier missed "
            "(new prompts, or stores that never landed)"
        ]
    out: list[str] = []
    configured = set(targets.tiers) or {"cpu", *(a.tier for a in lm.adapters)}
    if "cpu" in configured and (lm.l1_hit_tokens or 0) <= 0:
        out.append(
            f"DRAM tier (LMCache{where} L1) served nothing of {looked} tokens looked up in the last {w}"
        )
    missed_l1 = (lm.lookup_tokens or 0) - (lm.l1_hit_tokens or 0)
    for a in lm.adapters:
        holds = (a.usage_bytes or 0) > 0 or (a.stores_total or 0) > 0
        if a.tier in configured and holds and missed_l1 > 0 and (a.loads or 0) <= 0:
            out.append(
                f"{TIER_NAMES.get(a.tier, a.tier)} (LMCache{where} L2 {a.name}) holds data but served "
                f"nothing in the last {w} while {_fmt_tokens(missed_l1)} looked-up tokens missed DRAM"
            )
    return out


def warnings(snap: TopSnapshot, targets: Targets) -> list[str]:
    """What a person watching should act on: servers that stopped answering, tiers serving nothing."""
    out: list[str] = []
    w = f"{snap.window_s:.0f}s" if snap.window_s >= 1 else f"{snap.window_s:.1f}s"
    for s in snap.servers:
        if not s.up:
            out.append(f"server {s.url} is not answering ({s.error}); still watching")
    many = len(snap.lmcache) > 1
    for lm in snap.lmcache:
        out += _lmcache_warnings(lm, targets, w, f" {lm.url}" if many else "")
    if not snap.lmcache:
        for s in snap.servers:
            # Only an engine whose counters tell its own hits from the connector's (vLLM) can say
            # that the tiers served nothing.
            own = ENGINE_SPECS.get(s.engine or "")
            if not s.up or own is None or not own.separate_external_hits:
                continue
            offloaded = sum(
                v.tokens
                for k, v in s.sources.items()
                if k not in (token_sources.RECOMPUTED, token_sources.ENGINE_CACHE)
            )
            recomputed = s.sources.get(token_sources.RECOMPUTED)
            if targets.tiers and s.prompt_tokens and offloaded <= 0 and recomputed and recomputed.tokens > 0:
                out.append(
                    f"{s.url}: the offload tiers served nothing in the last {w} "
                    f"({_fmt_tokens(s.prompt_tokens)} prompt tokens)"
                )
    r = snap.remote
    if r is not None and not r.up:
        out.append(f"remote store {r.url} is not answering ({r.error}): the remote tier serves nothing")
    elif r is not None and (r.evicted_keys or 0) > 0:
        out.append(f"remote store {r.url} evicted {r.evicted_keys} keys in the last {w} (maxmemory reached)")
    if r is not None and r.up and r.live_layouts and len(r.live_layouts) > 1:
        each = "; ".join(f"{fp}: {', '.join(ws)}" for fp, ws in sorted(r.live_layouts.items()))
        out.append(
            f"remote store {r.url} is written with {len(r.live_layouts)} KV layouts at once ({each}): "
            "none reads another's keys (kvstack doctor --remote URL names the fields)"
        )
    return out


def capacity_view(cap: MeasuredCapacity, servers: Sequence[ServerView], window_s: float) -> CapacityView:
    """The live load (every server answering, together) against ``cap``."""
    up = [s for s in servers if s.up]
    served = [s.requests for s in up if s.requests is not None]
    live_per_s = sum(served) / window_s if served and window_s > 0 else None
    running = [s.running for s in up if s.running is not None]
    live_in_flight = sum(running) if running else None
    concurrency = cap.load if cap.kind == "concurrency" else None
    if concurrency is not None:
        used = _ratio(live_in_flight, concurrency)
    else:
        used = _ratio(live_per_s, cap.rate_per_s)
    return CapacityView(
        source=cap.source, layout=cap.layout, kind=cap.kind, status=cap.status, capacity=cap.label,
        rate_per_s=cap.rate_per_s, concurrency=concurrency, slo=cap.slo, live_per_s=live_per_s,
        live_in_flight=live_in_flight, used=used,
    )  # fmt: skip


def capacity_warnings(c: CapacityView, w: str) -> list[str]:
    """A load beyond what the sweep found the layout sustains within its SLO."""
    if c.used is None or c.used <= 1 or c.status == "above_ladder":
        return []  # above the ladder: the capacity is a lower bound, nothing is known beyond it
    live = (
        f"{c.live_in_flight:g} requests in flight"
        if c.concurrency is not None
        else f"{c.live_per_s:.3g} requests/s"
    )
    return [
        f"serving {live} in the last {w}, {c.used:.1f}x the capacity {c.layout} was measured to sustain "
        f"({c.capacity}; {c.slo}): expect the SLO to be missed"
    ]


def build(
    targets: Targets, before: Scrape, after: Scrape, previous_redis: RedisStats | None = None
) -> TopSnapshot:
    """The window between two scrapes of the same targets."""
    window_s = max(after.at - before.at, 0.0)
    empty = MetricsSnapshot()

    def pair(urls: tuple[str, ...]) -> tuple[MetricsSnapshot, MetricsSnapshot] | None:
        seen = [u for u in urls if u in after.lmcache]
        if not seen:
            return None
        b, a = MetricsSnapshot(), MetricsSnapshot()
        for u in seen:
            # Each server's series stay its own (a label of their source), so that one server's
            # counter reset is not hidden by another's growth.
            b = b.merged(_from(u, before.lmcache.get(u, empty)))
            a = a.merged(_from(u, after.lmcache[u]))
        return b, a

    servers = [
        server_view(url, before.servers.get(url, empty), snap, pair(targets.cache_servers_of(url)), window_s)
        for url, snap in after.servers.items()
    ]
    snap = TopSnapshot(
        time=after.wall,
        window_s=window_s,
        run_dir=targets.run_dir,
        servers=servers,
        lmcache=[
            lmcache_view(url, before.lmcache.get(url, empty), snap, window_s)
            for url, snap in after.lmcache.items()
        ],
        remote=(
            remote_view(targets.remote_shown or "", before.redis or previous_redis, after.redis)
            if after.redis is not None
            else None
        ),
        disk=DiskView(**vars(after.disk)) if after.disk is not None else None,
        canary=canary_view(after.canary, after.wall) if after.canary is not None else None,
        notes=list(targets.notes),
    )
    if targets.capacity is not None:
        snap.capacity = capacity_view(targets.capacity, servers, window_s)
    snap.warnings = warnings(snap, targets)
    if snap.capacity is not None:
        w = f"{window_s:.0f}s" if window_s >= 1 else f"{window_s:.1f}s"
        snap.warnings += capacity_warnings(snap.capacity, w)
    if snap.canary is not None:
        snap.warnings += canary_warnings(snap.canary)
    return snap
