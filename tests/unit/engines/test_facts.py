"""Machine facts for rendering: model directory contents and /dev/shm."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kvstack.engines.facts import gather_facts
from kvstack.hardware.snapshot import MemoryInfo


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
