"""plan_from_request: load the model and the workload, validate the remote URL (serving/planner.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvstack.errors import ModelConfigError, NetworkTargetError, WorkloadError
from kvstack.planning.plan import PlanRequest
from kvstack.serving.planner import check_remote_url, plan_from_request
from tests.unit.planning.helpers import snapshot

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "configs"


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("redis://cache:6379", "redis://cache:6379"),
        ("rediss://user:pw-secret@cache:6380/1", "rediss://user:***@cache:6380/1"),
        ("redis-sentinel://:pw-secret@s1:26379", "redis-sentinel://:***@s1:26379"),
        ("lm://lmcache-server:65432", "lm://lmcache-server:65432"),
    ],
)
def test_accepted_remote_urls_come_back_redacted(url: str, redacted: str) -> None:
    assert check_remote_url(url) == redacted


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("http://cache:6379", "must start with one of"),
        ("cache:6379", "must start with one of"),
        ("redis://", "has no host"),
        ("redis://cache:notaport", "not a valid URL"),
    ],
)
def test_rejected_remote_urls(url: str, needle: str) -> None:
    with pytest.raises(NetworkTargetError, match=needle) as info:
        check_remote_url(url)
    assert info.value.exit_code == 2


def test_rejected_url_does_not_echo_the_password() -> None:
    with pytest.raises(NetworkTargetError) as info:
        check_remote_url("http://user:hunter2-secret@cache:6379")
    assert "hunter2-secret" not in info.value.message


def test_plan_from_a_local_model_and_a_workload(tmp_path: Path) -> None:
    model_dir = tmp_path / "gpt-oss-20b"
    model_dir.mkdir()
    shutil.copy(CONFIGS / "gpt-oss-20b.json", model_dir / "config.json")
    plan = plan_from_request(
        PlanRequest(remote_url="redis://u:topsecret@r:6379"),
        str(model_dir),
        "agent-multi-turn",
        snapshot("h100-sxm"),
    )
    assert plan.model_path == str(model_dir.resolve())
    assert plan.workload.name == "agent-multi-turn" and plan.workload.users == 16
    assert plan.remote_url == "redis://u:***@r:6379"
    assert "topsecret" not in plan.model_dump_json()


def test_default_workload_is_one_user_at_the_model_maximum() -> None:
    plan = plan_from_request(PlanRequest(), "qwen3-32b", None, snapshot("h200"))
    assert (plan.workload.name, plan.workload.users, plan.max_model_len) == ("default", 1, 40960)
    assert plan.model_path == "Qwen/Qwen3-32B"


def test_errors_from_loading_propagate() -> None:
    with pytest.raises(ModelConfigError):
        plan_from_request(PlanRequest(), "no/such-model", None, snapshot("h100-sxm"))
    with pytest.raises(WorkloadError):
        plan_from_request(PlanRequest(), "llama-3.1-8b", "no-such-workload", snapshot("h100-sxm"))
