"""The engine spec probe on the real vLLM (kvstack/engines/vllm_kv_probe.py under the engine's
Python): its JSON for the demo model and the four families of issue #49, the cache, and
`kvstack plan` asking it. One probe per model for the module, shared through one cache."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvstack.engines.vllm_kv_spec import SpecJob, probe_engine_spec
from kvstack.model.engine_spec import EngineKvSpec
from kvstack.profiles import profiles_dir
from tests.support.cli_run import one_line_error, run_kvstack
from tests.support.deps import require_engine_module
from tests.support.edge_models import EDGE_MODELS, write_edge_model
from tests.support.engine_specs import recorded_spec

HW = str(profiles_dir() / "hardware" / "no-gpu.json")
PARALLEL = 2  # probes and plans at a time (each mostly vLLM's import): more starve the other workers


@dataclass(frozen=True)
class Probed:
    python: str
    cache: Path  # XDG_CACHE_HOME
    dirs: dict[str, Path]
    specs: dict[str, EngineKvSpec | None]
    cold_s: dict[str, float]

    @property
    def spec_dir(self) -> Path:
        return self.cache / "kvstack" / "engine-spec"

    def spec(self, name: str) -> EngineKvSpec:
        spec = self.specs[name]
        assert spec is not None, f"no answer for {name}"
        return spec


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> Probed:
    python = require_engine_module("vllm")
    root = tmp_path_factory.mktemp("engine-spec")
    dirs = {name: write_edge_model(name, root / name) for name in EDGE_MODELS}
    dirs["demo"] = profiles_dir() / "demo"
    cache = root / "xdg"

    def ask(directory: Path) -> tuple[EngineKvSpec | None, float]:
        start = time.monotonic()
        spec = probe_engine_spec(
            SpecJob(model=str(directory)), python, cache_dir=cache / "kvstack" / "engine-spec"
        )
        return spec, time.monotonic() - start

    # Two at a time: each probe is mostly a child interpreter importing vLLM.
    with pytest.MonkeyPatch.context() as patch, ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        patch.delenv("KVSTACK_ENGINE_SPEC", raising=False)
        answers = dict(zip(dirs, pool.map(ask, dirs.values()), strict=True))
    specs = {name: spec for name, (spec, _) in answers.items()}
    cold = {name: seconds for name, (_, seconds) in answers.items()}
    return Probed(python, cache, dirs, specs, cold)


def _shape(spec: EngineKvSpec) -> list[tuple[str, tuple[str, ...], int]]:
    """What must not drift between vLLM and the recorded answers: kinds, layers, block sizes (a state
    layer's dtypes follow the host: float32 SSM state on AVX512-BF16)."""
    assert spec.manager_on is not None
    return [(g.kind, g.layer_names, g.block_size) for g in spec.manager_on.groups]


def test_the_demo_models_spec(probed: Probed) -> None:
    spec = probed.spec("demo")
    assert spec.ok and spec.architecture == "LlamaForCausalLM"
    assert spec.manager_on is not None
    (group,) = spec.manager_on.groups
    assert (group.kind, group.layers, group.block_size, group.bytes_per_token) == ("full", 2, 128, 512)
    assert spec.manager_on.bytes_per_block == 2 * 128 * 512
    assert "vllm" not in sys.modules  # asked in a subprocess, never imported here


@pytest.mark.parametrize("name", ["demo", "gemma3n", "falcon-h1", "lfm2"])
def test_the_recorded_answers_are_vllms(probed: Probed, name: str) -> None:
    assert _shape(probed.spec(name)) == _shape(recorded_spec(name))


def test_each_family_as_vllm_builds_it(probed: Probed) -> None:
    gemma3n = probed.spec("gemma3n")
    assert len(gemma3n.shared_layers) == 3
    assert gemma3n.manager_on is not None and gemma3n.manager_on.kinds == ("sliding", "full")
    falcon = probed.spec("falcon-h1")
    assert falcon.manager_on is not None and falcon.manager_on.kinds == ("full", "state")
    assert falcon.manager_off is not None and not falcon.manager_off.ok
    lfm2 = probed.spec("lfm2")
    assert lfm2.manager_on is not None
    state = [g for g in lfm2.manager_on.groups if g.kind == "state"]
    assert state and all(
        g.state_shapes == ((2, 256),) and "SHORT_CONV" in (g.mamba_type or "") for g in state
    )
    refused = probed.spec("qwen2-swa")
    assert refused.refused and "Sliding window for some but all layers" in (refused.reason or "")


def test_the_second_ask_reads_the_cache(probed: Probed) -> None:
    start = time.monotonic()
    again = probe_engine_spec(
        SpecJob(model=str(probed.dirs["lfm2"])), probed.python, cache_dir=probed.spec_dir
    )
    cached_s = time.monotonic() - start
    assert again == probed.spec("lfm2")
    assert cached_s < 1.0 < probed.cold_s["lfm2"], (cached_s, probed.cold_s)


# The plans the tests below read: model -> its arguments beside --model and --hardware.
PLANS = {
    "qwen2-swa": (),
    "falcon-h1": ("--context", "4k", "--json"),
    "gemma3n": ("--context", "4k"),
    "lfm2": ("--context", "4k"),
}


@pytest.fixture(scope="module")
def plans(probed: Probed) -> dict[str, subprocess.CompletedProcess[str]]:
    """``kvstack plan`` of each model in PLANS, asking the engine through the module's cache, two at
    a time (each plan's own probe, for the plan's context, is mostly vLLM's import)."""
    env = {
        "XDG_CACHE_HOME": str(probed.cache),
        "KVSTACK_ENGINE_SPEC": "on",
        "KVSTACK_ENGINE_PYTHON": probed.python,
    }

    def plan(name: str) -> subprocess.CompletedProcess[str]:
        return run_kvstack("plan", "--model", str(probed.dirs[name]), "--hardware", HW, *PLANS[name], env=env)

    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        return dict(zip(PLANS, pool.map(plan, PLANS), strict=True))


def test_plan_refuses_what_vllm_refuses(plans: dict[str, subprocess.CompletedProcess[str]]) -> None:
    one_line_error(plans["qwen2-swa"], "Sliding window for some but all layers is not supported")


def test_plan_gives_falcon_h1_no_connector_that_cannot_carry_it(
    plans: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    proc = plans["falcon-h1"]
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["connector"] == "none"
    assert plan["model"]["state_layers"] == 4 and plan["model"]["engine_spec"]["ok"]


@pytest.mark.parametrize("name", ["gemma3n", "lfm2"])
def test_plan_says_its_kv_figures_are_the_engines(
    plans: dict[str, subprocess.CompletedProcess[str]], name: str
) -> None:
    proc = plans[name]
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if "KV dtype" in x)
    assert "from vLLM 0.32" in line and "estimated" not in line
