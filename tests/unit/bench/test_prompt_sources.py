"""Prompt tokens by source per layout: from the per-tier counters into results.json and the stacked plot."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from kvstack.bench.plots import PROMPT_SOURCES, source_shares
from kvstack.bench.report import RESULTS_JSON, environment, load_result, write_report
from kvstack.bench.schema import BenchResult, CacheStats, LayoutResult, RequestRow
from kvstack.bench.stats import cache_stats, summarize
from kvstack.clients.metrics import scrape_sync
from tests.support.stream_server import ServerKnobs, StreamServer


def test_cache_stats_split_prompt_tokens_by_tier_from_the_lmcache_counters() -> None:
    knobs = ServerKnobs(connector="lmcache", lmcache_mp=True, l2_fraction=0.5, l2_adapter="resp")
    prompt = " ".join(f"p{i}" for i in range(200))
    with StreamServer(knobs) as srv:
        before = scrape_sync([srv.url + "/metrics"])
        for _ in range(2):
            httpx.post(srv.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 1})
            httpx.post(srv.url + "/reset_prefix_cache")
        after = scrape_sync([srv.url + "/metrics"])
    stats = cache_stats(before, after)
    # 2 x 201 tokens: the first recomputed, the second 192 from LMCache (96 L1, 96 L2 through resp).
    assert stats.tokens_by_source == {"recomputed": 201 + 9, "engine_cache": 0, "dram": 96, "remote": 96}
    # Over a run DRAM is what the L2 tiers leave (LMCache's L1 count includes the engine's prefix).
    assert set(stats.tokens_by_source_derived) == {"dram"}
    assert stats.lmcache_mp_l2_loads == {"resp": 1}
    assert sum(stats.tokens_by_source.values()) == sum(stats.prompt_tokens_by_source.values())


def _row(layout: str) -> RequestRow:
    return RequestRow(
        layout=layout,
        id=f"{layout}-0",
        index=0,
        round=0,
        group="g",
        prompt_tokens=100,
        expected_prefix_tokens=80,
        ok=True,
        start_s=0.0,
        ttft_s=0.05,
        e2e_s=0.06,
    )


def _result() -> BenchResult:
    layouts = []
    for name, sources in (
        ("none", {"recomputed": 900.0, "engine_cache": 100.0}),
        (
            "lmcache-mp",
            {"recomputed": 200.0, "engine_cache": 100.0, "dram": 400.0, "disk": 200.0, "remote": 100.0},
        ),
        ("unknown", {}),
    ):
        layouts.append(
            LayoutResult(
                name=name,
                base_url="http://127.0.0.1:1",
                metrics_urls=[],
                started_at=0.0,
                complete=True,
                summary=summarize([_row(name)]),
                cache=CacheStats(engine="vllm", tokens_by_source=sources),
            )
        )
    return BenchResult(
        config={},
        environment=environment(),
        workload={"spec": {"name": "shared-prefix"}, "rounds": ["round 0"]},
        layouts=layouts,
        requests=[_row(x.name) for x in layouts],
    )


def test_results_json_carries_the_numbers_the_plot_stacks(tmp_path: Path) -> None:
    result = _result()
    written = write_report(result, tmp_path)
    assert tmp_path / PROMPT_SOURCES in written
    doc = json.loads((tmp_path / RESULTS_JSON).read_text())
    by_layout = {lay["name"]: lay["cache"]["tokens_by_source"] for lay in doc["layouts"]}
    assert by_layout["lmcache-mp"] == {
        "recomputed": 200,
        "engine_cache": 100,
        "dram": 400,
        "disk": 200,
        "remote": 100,
    }
    shares = source_shares(load_result(tmp_path))
    assert shares[0] == pytest.approx({"recomputed": 0.9, "engine_cache": 0.1})
    assert shares[1] == pytest.approx(
        {"recomputed": 0.2, "engine_cache": 0.1, "dram": 0.4, "disk": 0.2, "remote": 0.1}
    )
    assert shares[2] == {}


def test_the_plot_draws_one_stacked_bar_per_layout_in_the_sources_colors(tmp_path: Path) -> None:
    import matplotlib.image

    from kvstack.bench.plots import _COLORS, prompt_sources

    path = prompt_sources(_result(), tmp_path / PROMPT_SOURCES)
    image = matplotlib.image.imread(path)
    pixels = {tuple(round(float(c) * 255) for c in px[:3]) for row in image[::2] for px in row[::2]}

    def rgb(hex_color: str) -> tuple[int, ...]:
        return tuple(int(hex_color[i : i + 2], 16) for i in (1, 3, 5))

    for source in ("recomputed", "engine_cache", "dram", "disk", "remote"):
        assert rgb(_COLORS[source]) in pixels, source
    assert rgb(_COLORS["offload"]) not in pixels  # no layout had offloaded tokens of unknown tier
