"""The screen of `kvstack top`, drawn from a TopSnapshot only (the numbers ``--json`` prints)."""

from __future__ import annotations

import sys
import time

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from kvstack.clients import token_sources
from kvstack.rendering.console import out_console
from kvstack.top.snapshot import CanaryView, CapacityView, LmcacheView, ServerView, TopSnapshot
from kvstack.units import fmt_bytes, fmt_ms, fmt_pct


def _num(x: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def _sources(s: ServerView) -> Text:
    if not s.sources:
        return Text("-")
    if not any(v.tokens > 0 for v in s.sources.values()):
        return Text("no prompts in this window", style="dim")
    parts = [
        f"{token_sources.LABELS.get(k, k)}{'*' if k in s.derived else ''} {fmt_pct(v.share, 0)} "
        f"({v.per_s:,.0f}/s)"
        for k, v in s.sources.items()
        if v.tokens > 0 or k == token_sources.RECOMPUTED
    ]
    return Text(" · ".join(parts))


def servers_table(snap: TopSnapshot) -> Table:
    table = Table(title="servers", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1))
    table.add_column("server", no_wrap=True)
    for col in ("state", "run", "wait", "KV", "TTFT p50", "p90", "prompt tok/s"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("prompt tokens by source (window)")
    for s in snap.servers:
        state = Text("up", style="green") if s.up else Text("DOWN", style="bold red")
        table.add_row(
            s.url,
            state,
            _num(s.running),
            _num(s.waiting),
            fmt_pct(s.kv_usage, 0),
            fmt_ms(s.ttft_p50_s, 0, sep=False),
            fmt_ms(s.ttft_p90_s, 0, sep=False),
            _num(s.prompt_tokens_per_s, "{:,.1f}"),
            _sources(s) if s.up else Text(s.error or "", style="red"),
        )
    return table


def _lmcache_rows(table: Table, lm: LmcacheView, header: str | None) -> None:
    if header is not None and lm.up:
        table.add_row(Text(header, style="bold"), *[""] * 6)
    if not lm.up:
        table.add_row(Text(f"LMCache {lm.url} DOWN", style="bold red"), *["-"] * 6)
    else:
        used = fmt_bytes(lm.l1_usage_bytes) if lm.l1_usage_bytes is not None else "-"
        if lm.l1_size_bytes:
            used += f" / {fmt_bytes(lm.l1_size_bytes)}"
        table.add_row(
            "DRAM (LMCache L1)",
            _num(lm.l1_hit_tokens),
            _num(lm.l1_hit_tokens_per_s, "{:,.1f}"),
            _num(lm.l1_hit_tokens_total),
            used,
            "-",
            _num(lm.l1_evicted_chunks),
        )
        table.add_row(
            "LMCache L2 (all)",
            _num(lm.l2_hit_tokens),
            _num(lm.l2_hit_tokens_per_s, "{:,.1f}"),
            _num(lm.l2_hit_tokens_total),
            "-",
            "-",
            "-",
        )
        for a in lm.adapters:
            table.add_row(
                f"  {token_sources.LABELS.get(a.tier, a.tier)} (L2 {a.name})",
                "",
                "",
                "",
                fmt_bytes(a.usage_bytes) if a.usage_bytes is not None else "-",
                f"{_num(a.loads)}/{_num(a.stores)} ({_num(a.loads_total)}/{_num(a.stores_total)})",
                _num(a.evicted_chunks),
            )


def tiers_table(snap: TopSnapshot) -> Table:
    table = Table(title="tiers", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1))
    table.add_column("tier", no_wrap=True)
    for col in ("hit tokens", "hit tok/s", "since start", "used", "loads/stores", "evicted"):
        table.add_column(col, justify="right", no_wrap=True)
    for lm in snap.lmcache:
        _lmcache_rows(table, lm, f"LMCache {lm.url}" if len(snap.lmcache) > 1 else None)
    r = snap.remote
    if r is not None:
        if not r.up:
            table.add_row(Text(f"Redis {r.url} DOWN", style="bold red"), *["-"] * 6)
        else:
            used = fmt_bytes(r.used_memory_bytes) + (
                f" / {fmt_bytes(r.maxmemory_bytes)}" if r.maxmemory_bytes else ""
            )
            table.add_row(
                f"Redis {r.url} ({_num(r.keys)} keys)",
                f"hit {fmt_pct(r.hit_ratio, 0)}",
                "",
                f"hit {fmt_pct(r.hit_ratio_total, 0)}",
                used,
                "-",
                f"{_num(r.evicted_keys)} ({_num(r.evicted_keys_total)})",
            )
    d = snap.disk
    if d is not None:
        used = "-" if d.bytes is None else ("≥" if d.partial else "") + fmt_bytes(d.bytes)
        free = "" if d.free_bytes is None else f", {fmt_bytes(d.free_bytes)} free"
        table.add_row(f"disk {d.path}", "", "", "", used + free if d.error is None else d.error, "-", "-")
    return table


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def canary_line(c: CanaryView) -> str:
    """What the canary is doing (watching, waiting and why, fallback, ...), its checks by where they
    were served and their verdicts, the last pass, and the share of prefill it measured taking."""
    status = f"waiting ({c.waiting_for})" if c.status == "waiting" and c.waiting_for else c.status
    since = "no check passed yet"
    if c.seconds_since_pass is not None:
        since = f"last pass {_ago(c.seconds_since_pass)} ago"
    share = "not measured yet" if c.prefill_share is None else f"{c.prefill_share:.2%}"
    summary = c.summary.removeprefix("canary: ")
    return f"canary {status} · {summary} · {since} · prefill share {share} (budget {c.budget:.2%})"


def wrong_kv_line(c: CanaryView, now: float) -> str | None:
    """What serving did about wrong KV, once it did something: the offload tiers off since when and
    why, serving stopped, or only a warning while the tiers still serve."""
    fb = c.fallback
    if fb is None:
        return None
    when = f"{_clock(fb.at)} ({_ago(max(0.0, now - fb.at))} ago)"
    why = f"a check served from {fb.served_from!r} failed: {fb.detail or 'over the gate'}"
    if fb.tiers_off:
        return (
            f"OFFLOAD TIERS OFF since {when}: {why}; serving without {', '.join(fb.tiers_off)} "
            f"for the rest of this run ({fb.restarted} engine(s) restarted)"
        )
    if c.offload_off:
        # A later failure's record replaced the fallback's (it keeps no tiers): the tiers are still off.
        return (
            f"OFFLOAD TIERS OFF (since an earlier fallback: the run dir's events.jsonl says when); "
            f"wrong KV again at {when}: {why}"
        )
    if fb.action == "stop":
        return f"WRONG KV at {when}: {why}; kvstack stopped serving (--on-wrong-kv stop)"
    return f"WRONG KV at {when}: {why}; the offload tiers still serve (--on-wrong-kv {fb.action})"


def canary_lines(snap: TopSnapshot) -> list[Text]:
    """The canary's line, and a marked one when serving acted on wrong KV."""
    c = snap.canary
    if c is None:
        return []
    style = "green" if c.status == "watching" and not c.failed else "yellow"
    out = [Text(canary_line(c), style=style)]
    wrong = wrong_kv_line(c, snap.time)
    if wrong is not None:
        out.append(Text(f"!! {wrong}", style="bold red"))
    return out


def capacity_line(c: CapacityView) -> str:
    """The live load against the capacity measured for the served layout."""
    if c.concurrency is not None:
        live = "-" if c.live_in_flight is None else f"{c.live_in_flight:g} in flight"
    else:
        live = "-" if c.live_per_s is None else f"{c.live_per_s:.3g} requests/s"
    used = "" if c.used is None else f" ({c.used:.0%} of it)"
    return f"load {live}{used} · capacity {c.capacity} for {c.layout} · SLO {c.slo} · from {c.source}"


def render(snap: TopSnapshot) -> RenderableType:
    stamp = time.strftime("%H:%M:%S", time.localtime(snap.time))
    head = Text(f"kvstack top  {stamp}  window {snap.window_s:.1f} s", style="bold")
    if snap.run_dir:
        head.append(f"  run {snap.run_dir}", style="dim")
    head.append("  (q or Ctrl-C to leave)", style="dim")
    parts: list[RenderableType] = [head, servers_table(snap)]
    derived = dict.fromkeys(
        f"{token_sources.LABELS.get(k, k)}: {how}" for s in snap.servers for k, how in s.derived.items()
    )
    for line in derived:
        parts.append(Text(f"* {line}", style="dim"))
    if snap.lmcache or snap.remote is not None or snap.disk is not None:
        parts.append(tiers_table(snap))
    parts += canary_lines(snap)
    if snap.capacity is not None:
        over = snap.capacity.used is not None and snap.capacity.used > 1
        parts.append(Text(capacity_line(snap.capacity), style="bold yellow" if over else ""))
    for w in snap.warnings:
        parts.append(Text("warning: ", style="bold yellow") + Text(w))
    for n in snap.notes:
        parts.append(Text(f"note: {n}", style="dim"))
    return Group(*parts)


def print_window(snap: TopSnapshot, as_json: bool) -> None:
    """`kvstack top --once`: the window as JSON, or drawn once."""
    if as_json:
        sys.stdout.write(snap.to_json() + "\n")
    else:
        out_console(160, soft_wrap=False, highlight=True).print(render(snap))
