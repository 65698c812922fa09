"""Hugging Face ids through huggingface_hub's own cache resolution, against caches laid out here.

The online path is tested through the CLI against a loopback hub (tests/integration/test_hub.py):
huggingface_hub freezes HF_HUB_OFFLINE when first imported, and this process runs offline.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kvstack.errors import HubError
from kvstack.model import hub
from tests.support.hf_cache import add_snapshot, repo_dir

CONFIG = b'{"num_hidden_layers": 2}'
MAIN, V1 = "1" * 40, "2" * 40


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf" / "hub"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("Qwen/Qwen2.5-0.5B-Instruct", True),
        ("meta-llama/Llama-3.1-8B-Instruct", True),
        ("org/name_with.dots-1", True),
        ("llama-3.1-8b", False),  # a catalog name
        ("/models/llama", False),
        ("./org/name", False),
        ("~/org/name", False),
        ("org/name/extra", False),
        ("org--x/name", False),
        ("org/na..me", False),
        ("org/name-", False),
        ("a/" + "b" * 95, False),
    ],
)
def test_is_hub_id(spec: str, expected: bool) -> None:
    assert hub.is_hub_id(spec) is expected


def test_cache_dir_follows_huggingface_hubs_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub.cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub.cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "explicit"))
    assert hub.cache_dir() == tmp_path / "explicit"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE"),
        ({"HF_HUB_OFFLINE": "true"}, "HF_HUB_OFFLINE"),
        ({"HF_HUB_OFFLINE": "0"}, None),
        ({"HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": "1"}, "TRANSFORMERS_OFFLINE"),
    ],
)
def test_offline_variable(env: dict[str, str], expected: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert hub.offline_variable() == expected


def test_cached_snapshot_by_branch_commit_and_tag(cache: Path) -> None:
    add_snapshot(cache, "org/model", {"config.json": CONFIG}, commit=MAIN)
    add_snapshot(cache, "org/model", {"config.json": CONFIG}, commit=V1, refs=("v1",))
    found = hub.cached("org/model")
    assert found is not None
    assert (found.commit, found.revision, found.fetched) == (MAIN, None, False)
    assert found.path == repo_dir(cache, "org/model") / "snapshots" / MAIN
    assert (found.path / "config.json").read_bytes() == CONFIG  # through the blob symlink
    tagged = hub.cached("org/model", "v1")
    assert tagged is not None and (tagged.commit, tagged.revision) == (V1, "v1")
    by_commit = hub.cached("org/model", V1)
    assert by_commit is not None and by_commit.commit == V1
    assert hub.cached("org/model", "v2") is None
    assert hub.cached("org/other") is None
    assert hub.cached_refs("org/model") == ["main", "v1"]


def test_hf_hub_cache_wins_over_hf_home(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    add_snapshot(cache, "org/model", {"config.json": CONFIG})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert hub.cached("org/model") is None
    add_snapshot(tmp_path / "elsewhere", "org/model", {"config.json": CONFIG})
    assert hub.cached("org/model") is not None


def test_a_config_the_hub_said_does_not_exist_is_not_cached(cache: Path) -> None:
    snapshot = add_snapshot(cache, "org/model", {"tokenizer.json": b"{}"}, commit=MAIN)
    assert hub.cached("org/model") is None  # a snapshot without config.json
    no_exist = repo_dir(cache, "org/model") / ".no_exist" / MAIN / "config.json"
    no_exist.parent.mkdir(parents=True)
    no_exist.touch()
    assert hub.cached("org/model") is None and snapshot.is_dir()


def test_offline_miss_names_the_id_and_the_download_command(cache: Path) -> None:
    start = time.monotonic()
    with pytest.raises(HubError) as info:
        hub.fetch("Qwen/Qwen2.5-0.5B-Instruct")
    assert time.monotonic() - start < 1.0  # no network was tried
    message = info.value.message
    assert "Qwen/Qwen2.5-0.5B-Instruct is not in the Hugging Face cache" in message
    assert str(cache) in message and "HF_HUB_OFFLINE=1" in message
    assert message.endswith("download it with: hf download Qwen/Qwen2.5-0.5B-Instruct")
    assert "\n" not in message and info.value.hint and info.value.exit_code == 2


def test_offline_revision_not_in_the_cache_lists_what_is(cache: Path) -> None:
    add_snapshot(cache, "org/model", {"config.json": CONFIG}, commit=MAIN, refs=("main", "v1"))
    with pytest.raises(HubError) as info:
        hub.fetch("org/model", "v2")
    message = info.value.message
    assert "org/model is in the Hugging Face cache" in message
    assert "not at revision 'v2' (cached: main, v1)" in message
    assert message.endswith("hf download org/model --revision v2")


def test_transformers_offline_counts_too(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    with pytest.raises(HubError, match="TRANSFORMERS_OFFLINE=1 forbids"):
        hub.require_online("org/model", None)


def test_timeout_is_bounded_and_follows_hf_hub_etag_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    assert hub.timeout_s() == hub.TIMEOUT_S
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "7")
    assert hub.timeout_s() == 7.0
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "soon")
    assert hub.timeout_s() == hub.TIMEOUT_S


def test_endpoint_and_download_command(monkeypatch: pytest.MonkeyPatch) -> None:
    assert hub.endpoint() == "https://huggingface.co"
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.local:8080/")
    assert hub.endpoint() == "http://mirror.local:8080"
    assert hub.download_command("org/m", "v1") == "hf download org/m --revision v1"
