"""Whole plans against golden JSON in tests/golden/plans/.

After an intended change, regenerate them and review the diff before committing it:

    KVSTACK_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/planning/test_plan_golden.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from .helpers import plan_for

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "plans"
UPDATE = os.environ.get("KVSTACK_UPDATE_GOLDEN", "") not in ("", "0")

# file stem -> (hardware profile, catalog model, workload, request)
PLANS: dict[str, tuple[str, str, str | None, dict[str, Any]]] = {
    "h100-sxm__llama-3.1-8b__chatbot": ("h100-sxm", "llama-3.1-8b", "chatbot-shared-prompt", {}),
    "h100-sxm__llama-3.1-70b__infeasible": ("h100-sxm", "llama-3.1-70b", None, {}),
    "8x-h100__llama-3.1-70b__rag": ("8x-h100", "llama-3.1-70b", "rag-long-doc", {"users": 32}),
    "b200__llama-3.1-70b__rag-nvfp4": ("b200", "llama-3.1-70b", "rag-long-doc", {}),
    "tight-cgroup__llama-3.1-8b__staging-disk": (
        "tight-cgroup",
        "llama-3.1-8b",
        "rag-long-doc",
        {"users": 64},
    ),
    "rtx-pro-6000__qwen3-32b__sglang-hicache": (
        "rtx-pro-6000",
        "qwen3-32b",
        "chatbot-shared-prompt",
        {"engine": "sglang"},
    ),
}


@pytest.mark.parametrize("stem", sorted(PLANS))
def test_plan_matches_golden(stem: str) -> None:
    hw, model, workload, request = PLANS[stem]
    got = plan_for(hw, model, workload, **request).model_dump(mode="json")
    path = GOLDEN / f"{stem}.json"
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert path.exists(), f"{path} is missing: run with KVSTACK_UPDATE_GOLDEN=1 to write it"
    assert got == json.loads(path.read_text()), (
        f"plan differs from {path.name} (KVSTACK_UPDATE_GOLDEN=1 rewrites it)"
    )
