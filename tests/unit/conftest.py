"""Every unit test sees an empty Hugging Face cache, offline, with no token.

A model id resolves through the HF cache before the catalog (kvstack/model/source.py), so a test
must not depend on what this machine happens to have cached, nor reach the hub.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HF_VARIABLES = (
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_ENDPOINT",
    "TRANSFORMERS_OFFLINE",
)


@pytest.fixture(scope="session")
def _empty_hf_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf-home")


@pytest.fixture(autouse=True)
def _isolated_hugging_face(_empty_hf_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in HF_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(_empty_hf_home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(autouse=True)
def _no_engine_spec_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests plan with kvstack's own reader: asking the installed vLLM (a subprocess of seconds,
    kvstack/engines/vllm_kv_spec.py) is what tests/integration/test_engine_spec.py covers, and unit
    tests of the planner side feed it recorded answers."""
    monkeypatch.setenv("KVSTACK_ENGINE_SPEC", "off")
