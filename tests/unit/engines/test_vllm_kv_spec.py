"""The engine spec probe's parent side (engines/vllm_kv_spec.py): the answer read, kept per model
revision in a private cache, and no answer where vLLM cannot be asked. A fake engine Python stands
in for vLLM's (tests/integration/test_engine_spec.py runs the real one)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from kvstack.engines import vllm_kv_spec
from kvstack.engines.vllm_kv_spec import SpecJob, cache_key, probe_engine_spec

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "engine_spec"


def _fake_python(tmp_path: Path, answer: str, version: str = "0.32.0") -> Path:
    """An interpreter that reports ``version`` for -c and prints ``answer`` for the probe script,
    counting its probe runs in ``runs``."""
    (tmp_path / "answer.json").write_text(answer)
    script = tmp_path / "python"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-c" ]; then echo "{version}"; exit 0; fi\n'
        f"echo run >> {tmp_path / 'runs'}\n"
        "echo 'vLLM noise on stdout'\n"
        f"cat {tmp_path / 'answer.json'}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "model"
    directory.mkdir()
    (directory / "config.json").write_text('{"model_type": "lfm2"}')
    return directory


@pytest.fixture(autouse=True)
def _probing_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVSTACK_ENGINE_SPEC", raising=False)


def _runs(tmp_path: Path) -> int:
    runs = tmp_path / "runs"
    return len(runs.read_text().splitlines()) if runs.exists() else 0


def test_the_answer_is_kept_private_and_read_back(tmp_path: Path, model_dir: Path) -> None:
    python = _fake_python(tmp_path, (FIXTURES / "lfm2.json").read_text().replace("\n", " "))
    cache = tmp_path / "cache" / "engine-spec"
    job = SpecJob(model=str(model_dir))
    first = probe_engine_spec(job, str(python), cache_dir=cache)
    second = probe_engine_spec(job, str(python), cache_dir=cache)
    assert first is not None and first == second and first.architecture == "Lfm2ForCausalLM"
    assert _runs(tmp_path) == 1
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert [stat.S_IMODE(p.stat().st_mode) for p in cache.iterdir()] == [0o600]


def test_a_new_revision_vllm_or_argument_is_asked_again(tmp_path: Path, model_dir: Path) -> None:
    job = SpecJob(model=str(model_dir))
    key = cache_key(job, "0.32.0")
    assert cache_key(SpecJob(model=str(model_dir), kv_cache_dtype="fp8"), "0.32.0") != key
    assert cache_key(SpecJob(model=str(model_dir), max_model_len=4096), "0.32.0") != key
    assert cache_key(job, "0.33.0") != key
    (model_dir / "config.json").write_text('{"model_type": "lfm2", "num_hidden_layers": 2}')
    assert cache_key(job, "0.32.0") != key


def test_the_same_config_elsewhere_is_the_same_answer(tmp_path: Path, model_dir: Path) -> None:
    other = tmp_path / "copy"
    other.mkdir()
    (other / "config.json").write_bytes((model_dir / "config.json").read_bytes())
    assert cache_key(SpecJob(model=str(other)), "0.32.0") == cache_key(
        SpecJob(model=str(model_dir)), "0.32.0"
    )


def test_a_refusal_is_kept_and_a_failed_probe_is_not(tmp_path: Path, model_dir: Path) -> None:
    cache = tmp_path / "cache"
    job = SpecJob(model=str(model_dir))
    broken = json.dumps({"vllm_version": "0.32.0", "ok": False, "stage": "probe", "reason": "boom"})
    python = _fake_python(tmp_path, broken)
    assert probe_engine_spec(job, str(python), cache_dir=cache) is None
    assert probe_engine_spec(job, str(python), cache_dir=cache) is None
    assert _runs(tmp_path) == 2
    (tmp_path / "answer.json").write_text((FIXTURES / "qwen2-swa.json").read_text().replace("\n", " "))
    refused = probe_engine_spec(job, str(python), cache_dir=cache)
    assert refused is not None and refused.refused
    assert probe_engine_spec(job, str(python), cache_dir=cache) == refused
    assert _runs(tmp_path) == 3


def test_no_vllm_or_switched_off_is_no_answer(
    tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = _fake_python(tmp_path, "{}", version="")
    job = SpecJob(model=str(model_dir))
    assert probe_engine_spec(job, str(python), cache_dir=tmp_path / "c") is None
    monkeypatch.setenv("KVSTACK_ENGINE_SPEC", "off")
    python = _fake_python(tmp_path, (FIXTURES / "lfm2.json").read_text())
    assert probe_engine_spec(job, str(python), cache_dir=tmp_path / "c") is None
    assert _runs(tmp_path) == 0


def test_a_catalog_model_without_a_config_is_not_probed(tmp_path: Path) -> None:
    python = _fake_python(tmp_path, "{}")
    assert probe_engine_spec(SpecJob(model=str(tmp_path / "nowhere")), str(python)) is None
    assert _runs(tmp_path) == 0


def test_the_default_cache_is_under_the_users_cache_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(vllm_kv_spec.CACHE_ENV, raising=False)  # the default, whatever the caller set
    assert vllm_kv_spec.spec_cache_dir() == tmp_path / "kvstack" / "engine-spec"
