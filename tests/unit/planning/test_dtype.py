"""KV dtype by engine and compute capability (REFERENCE.md dtype table)."""

from __future__ import annotations

import pytest

from kvstack.errors import InputError, UnsupportedError
from kvstack.planning.dtype import (
    ENGINE_KV_DTYPES,
    SGLANG_NVFP4_MIN,
    check_override,
    choose_kv_dtype,
    dtype_bytes,
    sglang_has_nvfp4,
)

from .helpers import catalog_model

LLAMA = catalog_model("llama-3.1-8b")
DEEPSEEK = catalog_model("deepseek-v3")
NEW_SGLANG = SGLANG_NVFP4_MIN


def fits(_b: float) -> bool:
    return True


def tight(b: float) -> bool:
    return b < 1.0  # fits only below FP8


# engine, CC, does the working set fit at FP8, sglang version -> chosen value
DEFAULTS = [
    ("vllm", None, True, None, "auto"),
    ("vllm", (7, 5), True, None, "auto"),
    ("vllm", (8, 0), True, None, "auto"),  # A100: FP8 only through slower paths
    ("vllm", (8, 6), False, None, "auto"),
    ("vllm", (8, 9), True, None, "fp8"),  # L40S
    ("vllm", (9, 0), True, None, "fp8"),  # H100 / H200
    ("vllm", (9, 0), False, None, "fp8"),  # no NVFP4 on Hopper even when tight
    ("vllm", (10, 0), True, None, "fp8"),  # B200 with room: FP8 is enough
    ("vllm", (10, 0), False, None, "nvfp4"),  # B200 that needs the capacity
    ("vllm", (10, 3), False, None, "nvfp4"),  # B300
    ("vllm", (12, 0), False, None, "fp8"),  # RTX PRO 6000: vLLM has no NVFP4 KV on 12.x
    ("sglang", None, True, None, "auto"),
    ("sglang", (8, 0), True, None, "auto"),
    ("sglang", (9, 0), False, NEW_SGLANG, "fp8_e4m3"),
    ("sglang", (10, 0), False, NEW_SGLANG, "nvfp4"),
    ("sglang", (12, 0), False, NEW_SGLANG, "nvfp4"),
    ("sglang", (12, 0), False, "0.5.9", "fp8_e4m3"),  # too old for nvfp4
    ("sglang", (10, 0), False, None, "fp8_e4m3"),  # not installed: cannot promise nvfp4
    ("sglang", (12, 1), False, NEW_SGLANG, "fp8_e4m3"),  # only 12.0 among the 12.x parts
]


@pytest.mark.parametrize(("engine", "cc", "fits_fp8", "sglang", "expected"), DEFAULTS)
def test_default_choice(
    engine: str, cc: tuple[int, int] | None, fits_fp8: bool, sglang: str | None, expected: str
) -> None:
    choice = choose_kv_dtype(engine, cc, LLAMA, None, fits if fits_fp8 else tight, sglang)
    assert choice.value == expected
    assert choice.value in ENGINE_KV_DTYPES[engine]
    assert choice.reason
    if expected in ("fp8", "fp8_e4m3", "nvfp4"):
        assert any("can cost accuracy" in w for w in choice.warnings)
    else:
        assert choice.warnings == ()


def test_mla_never_gets_nvfp4_by_default() -> None:
    assert choose_kv_dtype("vllm", (10, 0), DEEPSEEK, None, tight).value == "fp8"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("auto", 2.0), ("bfloat16", 2.0), ("fp8", 1.0), ("fp8_e4m3", 1.0), ("fp8_e5m2", 1.0), ("nvfp4", 0.5625)],
)
def test_byte_sizes(value: str, expected: float) -> None:
    assert dtype_bytes(value, LLAMA) == expected


@pytest.mark.parametrize(
    ("engine", "value", "cc", "sglang", "error", "needle"),
    [
        ("vllm", "int3", (9, 0), None, InputError, "unknown --kv-dtype"),
        ("sglang", "fp8", (9, 0), None, InputError, "unknown --kv-dtype"),
        ("vllm", "fp8", None, None, UnsupportedError, "needs a CUDA GPU"),
        ("vllm", "fp8", (7, 0), None, UnsupportedError, "CC 8.0 or newer"),
        ("vllm", "nvfp4", (9, 0), None, UnsupportedError, "only on CC 10.x"),
        ("vllm", "nvfp4", (12, 0), None, UnsupportedError, "only on CC 10.x"),
        ("sglang", "nvfp4", (9, 0), NEW_SGLANG, UnsupportedError, "CC 10.x or 12.0"),
        ("sglang", "nvfp4", (12, 0), "0.5.3", UnsupportedError, "has no nvfp4"),
        ("sglang", "nvfp4", (10, 0), None, UnsupportedError, "not installed"),
    ],
)
def test_overrides_the_hardware_cannot_run(
    engine: str,
    value: str,
    cc: tuple[int, int] | None,
    sglang: str | None,
    error: type[Exception],
    needle: str,
) -> None:
    with pytest.raises(error, match=needle) as info:
        check_override(engine, value, cc, LLAMA, sglang)
    assert getattr(info.value, "exit_code", None) == 2
    assert getattr(info.value, "hint", None)


def test_nvfp4_override_refused_for_mla() -> None:
    with pytest.raises(UnsupportedError, match="MLA"):
        check_override("vllm", "nvfp4", (10, 0), DEEPSEEK, None)


@pytest.mark.parametrize(
    ("engine", "value", "cc", "sglang"),
    [
        ("vllm", "nvfp4", (10, 0), None),
        ("vllm", "fp8_e5m2", (9, 0), None),
        ("vllm", "auto", None, None),
        ("sglang", "nvfp4", (12, 0), NEW_SGLANG),
        ("sglang", "bf16", (9, 0), None),
    ],
)
def test_overrides_that_run_are_kept(
    engine: str, value: str, cc: tuple[int, int] | None, sglang: str | None
) -> None:
    choice = choose_kv_dtype(engine, cc, LLAMA, value, fits, sglang)
    assert choice.value == value
    assert "as asked" in choice.reason


def test_fp8_override_on_ampere_runs_but_warns_it_is_slower() -> None:
    choice = check_override("vllm", "fp8", (8, 0), LLAMA, None)
    assert choice.value == "fp8"
    assert any("slower" in w for w in choice.warnings)


def test_sglang_nvfp4_threshold() -> None:
    assert sglang_has_nvfp4(NEW_SGLANG) and sglang_has_nvfp4("0.5.23")
    assert not sglang_has_nvfp4("0.5.19") and not sglang_has_nvfp4(None)
    assert sglang_has_nvfp4("0.5.20rc1")  # a pre-release carries the release's features
