"""--model's order: a local directory, a Hugging Face id from the cache, a catalog name or id, the hub."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvstack.errors import HubError, ModelConfigError
from kvstack.model.source import resolve_model
from tests.support.hf_cache import add_snapshot, repo_dir

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "configs"
QWEN = "Qwen/Qwen2.5-0.5B-Instruct"
COMMIT = "7ae557604adf67be50417f59c2c2f167def9a775"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf" / "hub"


def test_a_cached_id_plans_from_its_snapshots_config(cache: Path) -> None:
    snapshot = add_snapshot(
        cache,
        QWEN,
        {"config.json": CONFIGS / "Qwen2.5-0.5B-Instruct.json"},
        commit=COMMIT,
        sizes={"model.safetensors": 988_097_824},
    )
    source = resolve_model(QWEN)
    assert (source.path, source.revision, source.origin, source.commit) == (QWEN, None, "hf-cache", COMMIT)
    geo = source.geometry
    assert (geo.name, geo.source) == (QWEN, str(snapshot))
    assert (geo.layers, geo.kv_heads, geo.head_dim) == (24, 2, 64)
    assert geo.kv_bytes_per_token == 24 * 2 * 2 * 64 * 2
    assert geo.weight_bytes == geo.checkpoint_bytes == 988_097_824  # the file, not the estimate
    assert geo.params == pytest.approx(0.49e9, rel=0.03)


def test_a_revision_names_the_snapshot_and_reaches_the_source(cache: Path) -> None:
    config = json.loads((CONFIGS / "Qwen2.5-0.5B-Instruct.json").read_text())
    add_snapshot(cache, QWEN, {"config.json": json.dumps(config).encode()}, commit="1" * 40)
    longer = {**config, "max_position_embeddings": 65536}
    add_snapshot(cache, QWEN, {"config.json": json.dumps(longer).encode()}, commit="2" * 40, refs=("v2",))
    assert resolve_model(QWEN).geometry.max_context == 32768
    source = resolve_model(QWEN, "v2")
    assert (source.revision, source.commit, source.geometry.max_context) == ("v2", "2" * 40, 65536)
    assert resolve_model(QWEN, "2" * 40).geometry.max_context == 65536


def test_a_cached_checkpoint_beats_the_catalog(cache: Path) -> None:
    # Qwen/Qwen3-32B is a catalog repo id; the cached snapshot's own config is what the engine loads.
    config = json.loads((CONFIGS / "Qwen3-32B.json").read_text())
    config["max_position_embeddings"] = 131072
    add_snapshot(cache, "Qwen/Qwen3-32B", {"config.json": json.dumps(config).encode()})
    source = resolve_model("Qwen/Qwen3-32B")
    assert (source.origin, source.geometry.max_context) == ("hf-cache", 131072)
    assert source.geometry.source.startswith(str(repo_dir(cache, "Qwen/Qwen3-32B")))


def test_an_id_not_cached_falls_back_to_the_catalog_without_the_network(cache: Path) -> None:
    source = resolve_model("Qwen/Qwen3-32B")
    # Named after the id, as the same model found in the cache is: the served name and the cache
    # namespace do not change once it is downloaded.
    assert (source.origin, source.path, source.geometry.name) == (
        "catalog",
        "Qwen/Qwen3-32B",
        "Qwen/Qwen3-32B",
    )
    assert source.geometry.max_context == 40960
    # A catalog name keeps the catalog's name and gives the engine the catalog's id.
    named = resolve_model("qwen3-32b")
    assert (named.origin, named.path, named.geometry.name) == ("catalog", "Qwen/Qwen3-32B", "qwen3-32b")


def test_an_alias_is_served_as_the_model_it_names(cache: Path) -> None:
    # meta-llama/Llama-3.1-8B (base) shares the geometry of the catalog's instruct tune.
    base = resolve_model("meta-llama/Llama-3.1-8B")
    assert (base.path, base.geometry.name) == ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B")
    assert base.geometry.layers == resolve_model("llama-3.1-8b").geometry.layers
    spelled = resolve_model("META-LLAMA/llama-3.1-8b-instruct")  # the catalog's own id, other case
    assert spelled.path == "meta-llama/Llama-3.1-8B-Instruct"


def test_an_unknown_id_offline_names_the_download_command(cache: Path) -> None:
    with pytest.raises(HubError) as info:
        resolve_model("acme/unknown-7b")
    assert info.value.message.endswith("download it with: hf download acme/unknown-7b")
    assert info.value.exit_code == 2


def test_a_revision_skips_the_catalog(cache: Path) -> None:
    with pytest.raises(HubError, match=r"Qwen/Qwen3-32B at revision 'v1' is not in the Hugging Face cache"):
        resolve_model("Qwen/Qwen3-32B", "v1")


def test_a_local_directory_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = tmp_path / "Qwen" / "Qwen3-32B"  # a relative path that looks like an id
    local.mkdir(parents=True)
    (local / "config.json").write_bytes((CONFIGS / "Qwen3-32B.json").read_bytes())
    monkeypatch.chdir(tmp_path)
    source = resolve_model("Qwen/Qwen3-32B")
    assert (source.origin, source.path, source.revision) == ("directory", str(local), None)


def test_revision_errors(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_bytes((CONFIGS / "Qwen3-32B.json").read_bytes())
    with pytest.raises(ModelConfigError, match="--revision applies to a Hugging Face id"):
        resolve_model(str(tmp_path), "main")
    with pytest.raises(ModelConfigError, match="--revision needs a Hugging Face id"):
        resolve_model("qwen3-32b", "main")
    with pytest.raises(ModelConfigError, match="--revision is empty"):
        resolve_model(QWEN, " ")


def test_catalog_names_and_bad_specs_keep_their_errors(tmp_path: Path) -> None:
    assert resolve_model("llama-3.1-8b").origin == "catalog"
    with pytest.raises(ModelConfigError, match="unknown model 'llama-9'"):
        resolve_model("llama-9")
    with pytest.raises(ModelConfigError, match="does not exist"):
        resolve_model(str(tmp_path / "missing"))
    with pytest.raises(ModelConfigError, match="--model is empty"):
        resolve_model("  ")
