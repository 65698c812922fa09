"""Engine arguments after -- that change the KV or the engine's memory: read into the plan, or refused
with the kvstack flag that owns them (serving/engine_args.py)."""

from __future__ import annotations

import pytest

from kvstack.errors import InputError
from kvstack.planning.request import PlanRequest
from kvstack.serving.engine_args import with_engine_args


@pytest.mark.parametrize(
    ("args", "field", "value"),
    [
        (["--dtype", "float32"], "dtype", "float32"),
        (["--dtype=half"], "dtype", "half"),
        (["--kv-cache-dtype", "fp8"], "kv_dtype", "fp8"),
        (["--kv_cache_dtype=fp8_e5m2"], "kv_dtype", "fp8_e5m2"),  # vLLM reads underscores too
        (["-tp", "2"], "tp", 2),
        (["--tensor-parallel-size=4"], "tp", 4),
        (
            ["--max-num-seqs", "4", "--dtype", "bfloat16", "--dtype", "float32"],
            "dtype",
            "float32",
        ),  # last wins
    ],
)
def test_vllm_arguments_the_plan_reads(args: list[str], field: str, value: object) -> None:
    assert getattr(with_engine_args(PlanRequest(), args), field) == value


def test_sglang_spells_the_tp_size_its_own_way() -> None:
    asked = with_engine_args(PlanRequest(engine="sglang"), ["--tp-size", "2", "--dtype", "float16"])
    assert (asked.tp, asked.dtype) == (2, "float16")


def test_other_arguments_leave_the_request_as_it_was() -> None:
    request = PlanRequest(kv_dtype="fp8")
    assert with_engine_args(request, ["--max-num-seqs", "4", "--enforce-eager"]) is request


@pytest.mark.parametrize(
    ("engine", "arg", "owner"),
    [
        ("vllm", "--max-model-len=8192", "--context"),
        ("vllm", "--gpu-memory-utilization", "--gpu-memory-utilization"),
        ("sglang", "--context-length", "--context"),
        ("sglang", "--mem-fraction-static", "--gpu-memory-utilization"),
    ],
)
def test_what_kvstack_sizes_the_tiers_from_is_refused_naming_its_flag(
    engine: str, arg: str, owner: str
) -> None:
    with pytest.raises(InputError) as refused:
        with_engine_args(PlanRequest(engine=engine), [arg, "0.5"])  # type: ignore[arg-type]
    assert arg.split("=")[0] in str(refused.value) and refused.value.hint is not None
    assert refused.value.hint.startswith(f"give it to kvstack instead: {owner}")


def test_a_value_that_contradicts_kvstacks_own_flag_is_refused() -> None:
    with pytest.raises(InputError, match="--kv-dtype fp8 and --kv-cache-dtype auto"):
        with_engine_args(PlanRequest(kv_dtype="fp8"), ["--kv-cache-dtype", "auto"])
    with pytest.raises(InputError, match="--tp 2 and --tensor-parallel-size 4"):
        with_engine_args(PlanRequest(tp=2), ["--tensor-parallel-size", "4"])
    assert with_engine_args(PlanRequest(tp=2), ["-tp", "2"]).tp == 2
    with pytest.raises(InputError, match="tensor-parallel size"):
        with_engine_args(PlanRequest(), ["-tp", "two"])
