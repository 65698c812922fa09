"""bench --check-correctness: cached answers judged by a recompute in the engine's own request,
against the noise floor of the same prompts made fresh.

Against the stand-in engine (a real HTTP server): a tier that counts hits but serves other tokens
(``corrupt_tier_from``) is caught; a sound one passes. SGLang's stand-in answers vLLM's scoring
request as SGLang does (an ordinary completion: its CompletionRequest has no prompt_logprobs), so
only SGLang's own ``/generate`` scores there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvstack.bench.report import load_result
from kvstack.bench.request import BenchRequest
from kvstack.bench.workload_run import run_bench
from kvstack.cli.app import run
from kvstack.serving.served_layout import ServedLayout
from tests.support.stream_server import ServerKnobs, StreamServer
from tests.unit.bench.replay.test_replay import write_trace

TIERED = ServerKnobs(
    connector="lmcache", lmcache_mp=True, block_size=16, num_gpu_blocks=8, chunk_tokens=32, l1_tokens=256
)


def bench_trace(tmp_path: Path, srv: StreamServer, *extra: str) -> int:
    trace = str(write_trace(tmp_path / "t.jsonl"))
    argv = ["bench", "--trace", trace, "--url", srv.url, "--block-tokens", "32"]
    argv += ["--time-scale", "0", "--max-output-tokens", "4", "--out", str(tmp_path / "out"), *extra]
    return run(argv)


@pytest.fixture(autouse=True)
def _no_serve_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_a_replay_checks_k_of_its_answers_the_tiers_served(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StreamServer(TIERED) as srv:
        rc = bench_trace(tmp_path, srv, "--check-correctness", "3")
    out = capsys.readouterr()
    assert rc == 0, out.err
    result = load_result(tmp_path / "out")
    c = result.layouts[0].correctness
    assert c is not None and (c.checked, c.passed) == (3, 3)
    assert all(x.tokens == 4 for x in c.checks)
    rows = {r.index: r for r in result.requests}
    # The answers judged are those the offload tiers served most of.
    judged = [rows[x.request] for x in c.checks if x.request is not None]
    assert all((r.dram_tokens or 0) + (r.disk_tokens or 0) > 0 for r in judged)
    # The floor: the same 3 prompts with a fresh first block, answered and scored the same way.
    assert c.noise_floor is not None and (c.noise_floor.answers, c.noise_floor.positions) == (3, 12)
    assert "fresh first block" in c.noise_floor.method
    assert "correctness: 3/3 cached requests had a typical disagreement within the" in c.summary
    assert "server: correctness 3/3 cached answers within the engine's own noise" in out.out


def test_a_replay_whose_tier_serves_wrong_tokens_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dataclasses import replace

    with StreamServer(replace(TIERED, corrupt_tier_from=1)) as srv:
        rc = bench_trace(tmp_path, srv, "--check-correctness", "2")
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "--check-correctness: 2 of 2 cached answers of server differ from recompute" in " ".join(
        err.split()
    )
    c = load_result(tmp_path / "out").layouts[0].correctness
    # Tokens 2-4 of each tier-served answer are the runner-up (2 nats down): 3 of 4 over the gate.
    assert c is not None and c.failed == 2 and all(x.over == 3 for x in c.checks)
    assert all("first at token 2" in x.detail for x in c.checks)


def test_a_replayed_answer_over_the_gate_passes_beside_its_recomputes_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The two cached answers' scorings (0, 1) sit 0.3 nats off and their fresh twins' (2, 3) do not.
    The recomputes' own answers to the cached prompts (4, 6) are scored 5 and 7, 0.3 off too: prompts
    on which the engine's decode and prefill differ, whatever the KV's source. Both pass beside them."""
    from dataclasses import replace

    with StreamServer(replace(TIERED, shifted_scores=(0, 1, 5, 7), score_shift=0.3)) as srv:
        rc = bench_trace(tmp_path, srv, "--check-correctness", "2")
        scored = srv.scores
    assert rc == 0, capsys.readouterr().err
    c = load_result(tmp_path / "out").layouts[0].correctness
    assert c is not None and (c.checked, c.passed) == (2, 2)
    assert all(
        x.recompute_typical == 0.3 and "within half of it of the recompute's own" in x.detail
        for x in c.checks
    )
    assert "2 over the gate within half of it of its recompute's own answer" in c.summary
    assert scored == 8  # 2 cached, 2 twins, then per failed answer: the recompute's answer and its scoring


def test_a_replayed_answer_far_from_its_recomputes_own_still_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dataclasses import replace

    with StreamServer(replace(TIERED, shifted_scores=(0, 1), score_shift=0.3)) as srv:
        rc = bench_trace(tmp_path, srv, "--check-correctness", "2")
    assert rc == 1
    c = load_result(tmp_path / "out").layouts[0].correctness
    assert c is not None and c.failed == 2
    assert all(
        x.recompute_typical == 0.0 and "sits 0.000 nats from the same scorer" in x.detail for x in c.checks
    )


def test_sglang_answers_are_scored_with_sglangs_own_request(tmp_path: Path) -> None:
    @contextlib.contextmanager
    def start(name: str) -> Iterator[ServedLayout]:
        knobs = ServerKnobs(engine="sglang", num_gpu_blocks=64, block_size=16, connector="hicache")
        with StreamServer(knobs) as srv:
            yield ServedLayout(name, srv.url, (srv.url + "/metrics",))

    args = BenchRequest(url=None, model="demo-model", workload="tier-overflow", prompt_tokens="256",
                     output_tokens=1, compare=["hicache"], check_correctness=2, out=tmp_path)  # fmt: skip
    result = run_bench(args, start_layout=start)
    c = result.layouts[0].correctness
    assert c is not None and (c.checked, c.passed) == (2, 2), c
