"""The screen draws the snapshot's numbers: what --json says is what the view shows."""

from __future__ import annotations

import io

from rich.console import Console

from kvstack.rendering.top import render
from kvstack.top.snapshot import (
    AdapterView,
    DiskView,
    LmcacheView,
    RemoteView,
    ServerView,
    SourceShare,
    TopSnapshot,
)


def text_of(snap: TopSnapshot) -> str:
    out = io.StringIO()
    Console(file=out, width=220, color_system=None).print(render(snap))
    return out.getvalue()


def test_the_screen_shows_servers_sources_tiers_and_warnings() -> None:
    snap = TopSnapshot(
        time=0.0,
        window_s=2.0,
        servers=[
            ServerView(
                url="http://127.0.0.1:8000",
                up=True,
                engine="vllm",
                running=3,
                waiting=1,
                kv_usage=0.42,
                ttft_p50_s=0.057,
                ttft_p90_s=0.21,
                prompt_tokens=4000,
                prompt_tokens_per_s=2000,
                sources={
                    "recomputed": SourceShare(tokens=1000, share=0.25, per_s=500),
                    "engine_cache": SourceShare(tokens=0, share=0.0, per_s=0),
                    "dram": SourceShare(tokens=2000, share=0.5, per_s=1000),
                    "disk": SourceShare(tokens=1000, share=0.25, per_s=500),
                },
            ),
            ServerView(url="http://127.0.0.1:9000", up=False, error="ConnectError: refused"),
        ],
        lmcache=[
            LmcacheView(
                url="http://127.0.0.1:8002",
                up=True,
                l1_hit_tokens=6144,
                l1_hit_tokens_per_s=3072,
                l1_hit_tokens_total=123456,
                l2_hit_tokens=2048,
                l2_hit_tokens_per_s=1024,
                l2_hit_tokens_total=8704,
                l1_usage_bytes=512 << 20,
                l1_size_bytes=1 << 30,
                adapters=[
                    AdapterView(name="fs", tier="disk", loads=2, loads_total=5, stores=1, stores_total=9)
                ],
            )
        ],
        remote=RemoteView(
            url="redis://:***@127.0.0.1:6379/0", up=True, keys=17, hit_ratio=0.8, evicted_keys=0
        ),
        disk=DiskView(path="/cache/disk", bytes=4 << 20, files=3, free_bytes=10 << 30),
        warnings=["server http://127.0.0.1:9000 is not answering (ConnectError: refused); still watching"],
    )
    screen = text_of(snap)
    for needle in (
        "http://127.0.0.1:8000",
        "42%",
        "57 ms",
        "210 ms",
        "2,000.0",
        "recomputed 25% (500/s)",
        "DRAM tier 50% (1,000/s)",
        "disk tier 25% (500/s)",
        "DOWN",
        "DRAM (LMCache L1)",
        "6,144",
        "123,456",
        "8,704",
        "disk tier (L2 fs)",
        "2/1 (5/9)",
        "Redis redis://:***@127.0.0.1:6379/0 (17 keys)",
        "hit 80%",
        "/cache/disk",
        "warning: server http://127.0.0.1:9000 is not answering",
    ):
        assert needle in screen, (needle, screen)
    assert "engine cache 0%" not in screen  # a source that served nothing is left out


def test_several_cache_servers_are_named_and_a_down_one_is_marked() -> None:
    snap = TopSnapshot(
        time=0.0,
        window_s=1.0,
        lmcache=[
            LmcacheView(url="http://127.0.0.1:8003", up=True, l1_hit_tokens_total=512),
            LmcacheView(url="http://127.0.0.1:8006", up=False, error="ConnectError"),
        ],
    )
    screen = text_of(snap)
    assert "LMCache http://127.0.0.1:8003" in screen
    assert "LMCache http://127.0.0.1:8006 DOWN" in screen
    assert "512" in screen


def test_a_derived_source_is_marked_and_says_how() -> None:
    how = "the offloaded tokens less the L2 tiers'"
    server = ServerView(
        url="http://127.0.0.1:8000",
        up=True,
        sources={
            "recomputed": SourceShare(tokens=100, share=0.5, per_s=50),
            "dram": SourceShare(tokens=60, share=0.3, per_s=30),
            "disk": SourceShare(tokens=40, share=0.2, per_s=20),
        },
        derived={"dram": how},
    )
    screen = text_of(TopSnapshot(time=0.0, window_s=2.0, servers=[server]))
    assert "DRAM tier* 30% (30/s)" in screen and "disk tier 20% (20/s)" in screen
    assert f"* DRAM tier: {how}" in screen
