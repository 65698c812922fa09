"""One dry-run serve resolves the model once: its config.json is read once, the Hugging Face cache is
asked once, and what resolving read (the directory, the file's SHA-256, the commit) is what the
launch and the engine probe carry (model/source.ModelSource)."""

from __future__ import annotations

import json
import pathlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvstack.cli.app import run
from kvstack.model import hub
from tests.support.deps import ROOT
from tests.support.hf_cache import add_snapshot

QWEN = "Qwen/Qwen2.5-0.5B-Instruct"
COMMIT = "7ae557604adf67be50417f59c2c2f167def9a775"
CONFIGS = ROOT / "tests" / "fixtures" / "configs"
H100 = ROOT / "profiles" / "hardware" / "h100-sxm.json"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts of config.json reads and Hugging Face cache lookups while the test runs."""
    seen: Counter[str] = Counter()
    read_bytes, read_text = pathlib.Path.read_bytes, pathlib.Path.read_text

    def counted_bytes(self: Path) -> bytes:
        if self.name == "config.json":
            seen["config.json"] += 1
        return read_bytes(self)

    def counted_text(self: Path, *args: object, **kwargs: object) -> str:
        if self.name == "config.json":
            seen["config.json"] += 1
        return read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pathlib.Path, "read_bytes", counted_bytes)
    monkeypatch.setattr(pathlib.Path, "read_text", counted_text)
    for name in ("cached", "fetch"):
        real = getattr(hub, name)

        def counted(*args: object, _real: object = real, _name: str = name, **kwargs: object) -> object:
            seen[f"hub.{_name}"] += 1
            return _real(*args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(hub, name, counted)
    yield seen


def _dry_run(tmp_path: Path, model: str, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    argv = ["serve", "--model", model, "--hardware", str(H100), "--cache-dir", str(tmp_path / "cache")]
    argv += ["--run-dir", str(tmp_path / "run"), "--dry-run", "--json"]
    assert run(argv) == 0
    doc: dict[str, object] = json.loads(capsys.readouterr().out)
    return doc


def test_a_local_directory_is_read_once(
    tmp_path: Path, reads: Counter[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVSTACK_ENGINE_SPEC", "off")  # the probe has its own test; this counts reads
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_bytes((CONFIGS / "Qwen2.5-0.5B-Instruct.json").read_bytes())
    reads.clear()
    doc = _dry_run(tmp_path, str(model), capsys)
    assert reads["config.json"] == 1, reads
    assert reads["hub.cached"] == 0 and reads["hub.fetch"] == 0, reads
    assert isinstance(doc["plan"], dict) and doc["plan"]["model_path"] == str(model)


def test_a_cached_hub_id_asks_the_cache_once_and_reads_its_config_once(
    tmp_path: Path, reads: Counter[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVSTACK_ENGINE_SPEC", "off")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    add_snapshot(
        tmp_path / "hf" / "hub",
        QWEN,
        {"config.json": CONFIGS / "Qwen2.5-0.5B-Instruct.json"},
        commit=COMMIT,
        sizes={"model.safetensors": 988_097_824},
    )
    reads.clear()
    doc = _dry_run(tmp_path, QWEN, capsys)
    assert reads["config.json"] == 1, reads
    assert reads["hub.cached"] == 1 and reads["hub.fetch"] == 0, reads
    assert isinstance(doc["plan"], dict) and doc["plan"]["model_path"] == QWEN
