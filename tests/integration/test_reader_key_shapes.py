"""The key shapes kvstack's config reader refused before the engine was asked (docs/models.md,
"What the sweep found"), planned by the real ``kvstack plan`` with the real vLLM probe: each reaches
the engine, and what vLLM answers is the verdict: a plan on its spec, its own refusal in one line, or
(where the probe cannot build the model on the meta device) the labelled estimate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.arch_sweep import plan_verdict, run_plan
from tests.support.deps import require_engine_module
from tests.support.edge_models import write_edge_model
from tests.support.fs_guard import isolated_cli_env

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return isolated_cli_env(tmp_path_factory.mktemp("home"), require_engine_module("vllm"))


def _plan(name: str, tmp_path: Path, env: dict[str, str]) -> tuple[str, str, dict[str, Any] | None]:
    proc = run_plan(write_edge_model(name, tmp_path / name), env)
    return plan_verdict(proc.returncode, proc.stdout, proc.stderr)


def test_bloom_without_a_context_key_plans_at_vllms_2048(tmp_path: Path, env: dict[str, str]) -> None:
    verdict, detail, plan = _plan("bloom", tmp_path, env)
    assert verdict == "plan" and plan is not None, detail
    assert plan["max_model_len"] == 2048
    # vLLM's probe cannot build Bloom's ALiBi slopes on the meta device: the reader's estimate.
    spec = plan["model"].get("engine_spec")
    assert spec is None or spec["ok"], spec


def test_mamba_plans_on_the_engines_state_spec(tmp_path: Path, env: dict[str, str]) -> None:
    verdict, detail, plan = _plan("mamba", tmp_path, env)
    assert verdict == "plan" and plan is not None, detail
    assert plan["model"]["engine_spec"]["ok"] and plan["model"]["state_layers"] == 4
    assert plan["max_model_len"] == 2048 and detail == "none"


def test_dbrx_plans_on_the_engines_spec(tmp_path: Path, env: dict[str, str]) -> None:
    verdict, detail, plan = _plan("dbrx", tmp_path, env)
    assert verdict == "plan" and plan is not None, detail
    assert plan["model"]["engine_spec"]["ok"] and plan["model"]["full_attention_layers"] == 4


def test_nemotron_h_is_read_and_refused_by_vllm_in_one_line(tmp_path: Path, env: dict[str, str]) -> None:
    verdict, detail, _ = _plan("nemotron-h", tmp_path, env)
    assert verdict == "refused", detail
    assert detail.startswith("vLLM ") and "1 full-attention + 1 state-space" in detail
    assert "is_act_and_mul=False" in detail
