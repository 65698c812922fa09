"""An engine argument that changes the KV is the plan's: `kvstack serve -- --dtype float32` on the demo
model with a real vLLM computes in float32, and the plan holds its KV at float32's bytes, twice bf16's:
the kv-size step (the plan's pool against the engine's own "KV cache size" line) passes within 2%.

This is also the path kvstack's own choice takes on a CPU without bf16 arithmetic (planning/
compute_dtype.py): the plan asks for float32, the probe is asked at it, the engine is started with it.
One engine start, without offload (the claim is the engine's own pool).
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import start_serve, wait_no_engine


def test_serve_with_dtype_float32_plans_the_kv_the_engine_allocates(
    engine_ready: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp("dtype")
    session = start_serve(tmp, "--offload", "none", "--exit-after-validate", "--", "--dtype", "float32")
    try:
        assert session.proc.wait(timeout=900) == 0, session.output()[-3000:]
    finally:
        wait_no_engine(session.port)
    plan = json.loads((session.run_dir / "plan.json").read_text())
    assert plan["model"]["dtype"] == "float32" and plan["model"]["checkpoint_dtype"] == "bfloat16"
    assert "--dtype float32 among the engine arguments" in plan["reasons"]["dtype"]
    assert plan["kv_bytes_per_token"] == 2 * 2 * 2 * 64 * 4  # 2 layers x K,V x 2 KV heads x 64 x float32
    assert "dtype=torch.float32" in (session.run_dir / "engine.log").read_text(errors="replace")
    report = json.loads((session.run_dir / "validation.json").read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["kv-size"]["verdict"] == "pass", steps["kv-size"]
    assert "2.0 KiB/token" in steps["kv-size"]["evidence"][1], steps["kv-size"]
