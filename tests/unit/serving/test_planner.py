"""plan_for_inputs: load the model and the workload, refuse a remote URL that remote/url.py refuses
(serving/planner.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvstack.errors import ModelConfigError, NetworkTargetError, WorkloadError
from kvstack.planning.predict.capacity_schema import CapacityAsk
from kvstack.remoteurl import ACCEPTED_FORMS
from kvstack.serving.plan_inputs import PlanInputs
from kvstack.serving.planner import plan_for_inputs
from tests.unit.planning.helpers import snapshot

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "configs"


@pytest.mark.parametrize("url", ["redis://u:topsecret@cache", "redis://cache:0", "http://cache:6379"])
def test_the_plan_takes_only_a_url_remote_url_py_accepts(url: str) -> None:
    # One rule for every command: plan refuses what serve, export and doctor refuse (a URL without a
    # port: LMCache's parse_remote_url asserts one), and names the accepted forms.
    with pytest.raises(NetworkTargetError) as info:
        plan_for_inputs(PlanInputs(model="qwen3-32b"), url, snapshot=snapshot("h100-sxm"))
    assert info.value.exit_code == 2 and info.value.hint is not None and ACCEPTED_FORMS in info.value.hint
    assert "topsecret" not in info.value.message


def test_plan_from_a_local_model_and_a_workload(tmp_path: Path) -> None:
    model_dir = tmp_path / "gpt-oss-20b"
    model_dir.mkdir()
    shutil.copy(CONFIGS / "gpt-oss-20b.json", model_dir / "config.json")
    plan = plan_for_inputs(
        PlanInputs(model=str(model_dir), workload="agent-multi-turn"),
        "redis://u:topsecret@r:6379",
        snapshot=snapshot("h100-sxm"),
    )
    assert plan.model.path == str(model_dir.resolve())
    assert plan.workload.name == "agent-multi-turn" and plan.workload.users == 16
    assert plan.transfer.remote_url == "redis://u:***@r:6379"
    assert "topsecret" not in plan.model_dump_json()


def test_default_workload_is_one_user_at_the_model_maximum() -> None:
    plan = plan_for_inputs(PlanInputs(model="qwen3-32b"), None, snapshot=snapshot("h200"))
    assert (plan.workload.name, plan.workload.users, plan.model.max_model_len) == ("default", 1, 40960)
    assert plan.model.path == "Qwen/Qwen3-32B"


def test_errors_from_loading_propagate() -> None:
    with pytest.raises(ModelConfigError):
        plan_for_inputs(PlanInputs(model="no/such-model"), None, snapshot=snapshot("h100-sxm"))
    with pytest.raises(WorkloadError):
        plan_for_inputs(
            PlanInputs(model="llama-3.1-8b", workload="no-such-workload"), None, snapshot=snapshot("h100-sxm")
        )


def test_the_capacity_takes_the_snapshots_gpu_memory_and_the_trace() -> None:
    """plan --slo-ttft: vLLM's scheduler defaults follow the snapshot's GPU (a B200's 179 GiB: the
    largest), and the synthetic workload stands in where no trace is given."""
    b200 = snapshot("b200")
    ask = CapacityAsk(slo_ttft_s=2.0, output_tokens=8)
    plan = plan_for_inputs(PlanInputs(model="llama-3.1-8b", context="8k"), None, snapshot=b200, capacity=ask)
    cap = plan.capacity
    assert cap is not None and cap.ask == ask and not cap.traced
    memory = b200.gpus[0].memory_total_bytes
    assert memory is not None and memory >= 160 << 30
    assert cap.limits_from.startswith("16,384 tokens a step, 1,024 sequences")
    assert f"{memory / (1 << 30):.1f} GiB a GPU" in cap.limits_from
    assert cap.shares_from.startswith("synthetic: ")
