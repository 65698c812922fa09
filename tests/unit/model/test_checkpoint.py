"""The weights' size as stored: a safetensors index's total, else the files' sizes."""

from __future__ import annotations

import json
from pathlib import Path

from kvstack.model.checkpoint import checkpoint_bytes, has_weights, index_total_size


def _index(path: Path, total: object) -> None:
    path.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": {}}))


def test_the_safetensors_index_total_wins(tmp_path: Path) -> None:
    _index(tmp_path / "model.safetensors.index.json", 16_060_522_496)
    (tmp_path / "model-00001-of-00004.safetensors").write_bytes(b"\0" * 10)  # a partial download
    assert checkpoint_bytes(tmp_path) == 16_060_522_496


def test_without_an_index_the_files_sizes_add_up(tmp_path: Path) -> None:
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 100)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"\0" * 23)
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0" * 999)  # safetensors are what gets loaded
    assert checkpoint_bytes(tmp_path) == 123
    assert has_weights(tmp_path)


def test_pytorch_bins_when_there_are_no_safetensors(tmp_path: Path) -> None:
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0" * 999)
    (tmp_path / "training_args.bin").write_bytes(b"\0" * 5)  # not weights
    assert checkpoint_bytes(tmp_path) == 999


def test_symlinks_into_blobs_count_the_blob(tmp_path: Path) -> None:
    blob = tmp_path / "blobs" / "abc"
    blob.parent.mkdir()
    with blob.open("wb") as fh:
        fh.truncate(988_097_824)  # sparse: Qwen2.5-0.5B's model.safetensors
    snapshot = tmp_path / "snapshots" / "c0ffee"
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").symlink_to("../../blobs/abc")
    assert checkpoint_bytes(snapshot) == 988_097_824


def test_a_dangling_symlink_means_unknown(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").symlink_to(tmp_path / "missing-blob")
    assert checkpoint_bytes(tmp_path) is None


def test_no_weights_and_malformed_indexes(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert checkpoint_bytes(tmp_path) is None and not has_weights(tmp_path)
    for bad in ("not json", json.dumps([1]), json.dumps({"metadata": {"total_size": -1}})):
        (tmp_path / "model.safetensors.index.json").write_text(bad)
        assert index_total_size(tmp_path / "model.safetensors.index.json") is None
    _index(tmp_path / "model.safetensors.index.json", True)
    assert checkpoint_bytes(tmp_path) is None
