"""Machine facts for rendering: model directory contents and /dev/shm."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kvstack.engines.facts import gather_facts
from kvstack.hardware.snapshot import MemoryInfo
from tests.support.hf_cache import add_snapshot


def test_local_dir_without_weights_means_dummy_weights(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"a": 1}')
    (tmp_path / "tokenizer.json").write_text("{}")
    facts = gather_facts(str(tmp_path))
    assert facts.model_local and not facts.model_has_weights
    assert facts.model_config_sha256 == hashlib.sha256(b'{"a": 1}').hexdigest()


def test_safetensors_count_as_weights(tmp_path: Path) -> None:
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"\0")
    facts = gather_facts(str(tmp_path))
    assert facts.model_has_weights and facts.model_config_sha256 is None


def test_hub_id_is_not_local_and_shm_comes_from_memory_info() -> None:
    facts = gather_facts("meta-llama/Llama-3.1-8B-Instruct", MemoryInfo(shm_free_bytes=64 << 30))
    assert not facts.model_local and facts.model_has_weights
    assert facts.shm_free_bytes == 64 << 30


def _hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf" / "hub"


def test_cached_hub_id_is_judged_by_its_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = _hub_cache(tmp_path, monkeypatch)
    add_snapshot(
        cache, "kvstack/demo", {"config.json": b'{"a": 1}', "model.safetensors": b"\0" * 8}, commit="c" * 40
    )
    facts = gather_facts("kvstack/demo")
    assert facts.model_local and facts.model_has_weights
    assert facts.model_commit == "c" * 40
    assert facts.model_config_sha256 == hashlib.sha256(b'{"a": 1}').hexdigest()
    assert gather_facts("kvstack/demo", revision="v9").model_commit is None  # not cached at v9


def test_a_hub_id_is_never_served_with_dummy_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A snapshot kvstack fetched for a plan holds config.json only; serve's preflight
    # (hub.require_weights, tests/integration/test_hub.py) decides whether it can be launched.
    cache = _hub_cache(tmp_path, monkeypatch)
    add_snapshot(cache, "kvstack/demo", {"config.json": b"{}"})
    facts = gather_facts("kvstack/demo")  # HF_HUB_OFFLINE=1 (tests/unit/conftest.py)
    assert facts.model_local and facts.model_has_weights
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "config.json").write_text("{}")
    assert not gather_facts(str(tmp_path / "local")).model_has_weights  # a directory: dummy weights


def test_the_hub_token_is_a_secret_of_the_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_not_to_be_printed")
    assert gather_facts("meta-llama/Llama-3.1-8B-Instruct").hub_token == "hf_not_to_be_printed"
    assert "hf_not_to_be_printed" not in repr(gather_facts("meta-llama/Llama-3.1-8B-Instruct"))
    (tmp_path / "config.json").write_text("{}")
    assert gather_facts(str(tmp_path)).hub_token is None  # a local directory needs none
