"""GPU plans made on this CPU machine for real quantized checkpoints (tests/fixtures/configs/quantized:
their released config.json files), asked of the real vLLM: what only its CPU platform refuses (MXFP4
MoE and block-scaled FP8 without AMX tiles, NVFP4 always) is a note, never the verdict; the weights
are sized by the format; a GPU older than vLLM's minimum for the format is refused in one line
naming the GPUs that can.
The other half of the checkpoints: test_gpu_plans_from_cpu_moe.py (tests/support/quantized_plans.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvstack.errors import UnsupportedError
from kvstack.hardware.snapshot import HardwareSnapshot
from tests.support.quantized_plans import (
    CHECKPOINTS,
    QUANTIZED,
    Plans,
    check_formats,
    check_weights,
    plan,
    plans_of,
)
from tests.unit.planning.helpers import snapshot

HERE = (
    "Qwen--Qwen3-32B-FP8",
    "openai--gpt-oss-20b",
    "nvidia--MiniMax-M2.5-NVFP4",
    "nvidia--Llama-3.1-70B-Instruct-FP8",
    "TheBloke--Llama-2-13B-chat-GPTQ",
)
MOE = (  # test_gpu_plans_from_cpu_moe.py
    "deepseek-ai--DeepSeek-R1",
    "openai--gpt-oss-120b",
    "nvidia--DeepSeek-V3.1-NVFP4",
    "moonshotai--Kimi-K2.5",
    "Qwen--Qwen2.5-7B-Instruct-AWQ",
)


@pytest.fixture(scope="module")
def spec_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engine-spec")


@pytest.fixture(scope="module")
def plans(spec_cache: Path) -> Plans:
    return plans_of(HERE, spec_cache)


def test_every_format_plans_on_h100_h200_and_b200(plans: Plans) -> None:
    check_formats(plans)


def test_weights_are_the_index_total_or_the_formats_bits(plans: Plans) -> None:
    check_weights(plans)


def test_the_modelopt_scheme_beside_config_json_is_read() -> None:
    config = json.loads((QUANTIZED / "nvidia--Llama-3.1-70B-Instruct-FP8" / "config.json").read_text())
    assert "quantization_config" not in config  # vLLM too reads hf_quant_config.json for it


def t4() -> HardwareSnapshot:
    """A T4 (CC 7.5, 16 GB): built from the H100 snapshot, the GPU's facts from NVIDIA's data sheet."""
    snap = snapshot("h100-sxm")
    gpu = snap.gpus[0].model_copy(
        update={"name": "Tesla T4", "compute_capability": (7, 5), "memory_total_bytes": 16 * 2**30}
    )
    return snap.model_copy(update={"gpus": [gpu]})


def test_a_gpu_older_than_vllms_minimum_for_the_format_is_refused_naming_the_gpus_that_can(
    plans: Plans, spec_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVSTACK_ENGINE_SPEC_CACHE", str(spec_cache))  # the module's probes, answered
    with pytest.raises(UnsupportedError) as refused:
        plan("openai--gpt-oss-20b", t4())
    message = str(refused.value)
    assert "CC 8.0 or newer" in message and "Tesla T4 is CC 7.5" in message and "\n" not in message
    assert refused.value.hint is not None and "A100" in refused.value.hint and "H100" in refused.value.hint
    assert plan("TheBloke--Llama-2-13B-chat-GPTQ", t4()).feasible  # GPTQ runs from CC 6.0


def test_every_fixture_is_planned_by_one_of_the_two_modules() -> None:
    # A new fixture directory cannot slip past the checks: it is in the table and in one module.
    dirs = {p.name for p in QUANTIZED.iterdir() if p.is_dir()}
    assert dirs == set(CHECKPOINTS) == set(HERE) | set(MOE) and not set(HERE) & set(MOE)
