"""`kvstack bench`'s request: the combinations of flags refused before anything is asked or started,
in the order the CLI always refused them, and what the workload bench is handed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvstack.bench.request import BenchRequest
from kvstack.errors import InputError

URL = "http://127.0.0.1:8000"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"url": URL, "concurrency": 4, "rate": 2.0}, "--concurrency and --rate exclude each other"),
        ({"check_correctness": 1001}, "--check-correctness must be between 0 and 1000 requests, not 1001"),
        ({"url": URL, "compare": ["none"]}, "--compare starts its own servers"),
        ({"url": URL, "extra_args": ["--foo", "1"]}, "engine arguments (--foo 1) need a server"),
        ({"l1_size": "lots"}, "--l1-size must be a size"),
        ({"lmcache": URL}, "--lmcache names the cache server of a running server (--url)"),
        ({"url": URL, "run_dir": Path("/tmp")}, "--run-dir with --url is read by --trace only"),
        (
            {"url": URL, "disk_size": "8MiB"},
            "--l1-size/--disk-size size the tiers of a server kvstack starts",
        ),
        ({"l1_size": "1MiB"}, "below LMCache's smallest DRAM tier"),
        ({"compare": ["none,bogus"]}, "--compare must be one of"),
        ({"offload": "bogus"}, "--offload must be one of"),
        # Two mistakes: the first of the CLI's checks names its flag.
        ({"check_correctness": -1, "compare": ["bogus"]}, "--check-correctness"),
        ({"lmcache": URL, "l1_size": "lots"}, "--l1-size must be a size"),
        ({"l1_size": "1MiB", "compare": ["bogus"]}, "--l1-size 1.0 MiB"),
    ],
)
def test_refusals(flags: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError) as err:
        BenchRequest(**flags)
    assert message in err.value.message


def test_the_layouts_served_are_the_compare_list_else_the_offload() -> None:
    assert BenchRequest(compare=["none, lmcache", "none", "native"]).layouts() == [
        "none",
        "lmcache",
        "native",
    ]
    assert BenchRequest(offload="native").layouts() == ["native"]
    assert BenchRequest(url=URL, offload="native").layouts() == []


def test_the_workload_bench_gets_parsed_counts_and_the_cache_servers_metrics() -> None:
    request = BenchRequest(
        url=URL, rate=2.5, prompt_tokens="8k", metrics_urls=["http://m:1"], lmcache="http://c:2"
    )
    assert (request.prompt_token_count, request.rate) == (8192, 2.5)
    assert request.all_metrics_urls == ["http://m:1", "http://c:2"] and request.layouts() == []
    with pytest.raises(InputError, match="--prompt-tokens must be a token count"):
        _ = BenchRequest(url=URL, prompt_tokens="lots").prompt_token_count
