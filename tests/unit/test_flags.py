"""Flags declared once on inputs models (kvstack/flags.py): choices and ranges are checked when the
model is made, from code or from the command line, with one wording."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pytest

from kvstack.errors import InputError
from kvstack.flags import Inputs, flag


class Knobs(Inputs):
    name: Annotated[str, flag("--name", help="A name.", choices=("a", "b"))] = "a"
    count: Annotated[int | None, flag("--count", help="At least 1.", ge=1, example="4")] = None
    wait: Annotated[float, flag("--wait", help="Positive.", gt=0)] = 1.0
    unflagged: int = 0


def test_the_flags_are_the_annotated_fields_in_order() -> None:
    assert list(Knobs.flags()) == ["name", "count", "wait"]
    assert Knobs.flags()["count"].names == ("--count",)


@pytest.mark.parametrize(
    ("values", "message", "hint"),
    [
        ({"name": "c"}, "--name must be one of a, b, not 'c'", "e.g. --name a"),
        ({"count": 0}, "--count must be at least 1, not 0", "e.g. --count 4"),
        ({"wait": 0.0}, "--wait must be positive, not 0", "e.g. --wait 1"),
        ({"wait": -2.5}, "--wait must be positive, not -2.5", "e.g. --wait 1"),
    ],
)
def test_a_value_out_of_range_is_one_input_error(values: dict[str, object], message: str, hint: str) -> None:
    with pytest.raises(InputError) as caught:
        Knobs(**values)  # type: ignore[arg-type]
    assert caught.value.message == message and caught.value.hint == hint
    assert caught.value.exit_code == 2


def test_values_in_range_and_no_value_pass() -> None:
    k = Knobs(name="b", count=1, wait=0.5, unflagged=-3)
    assert (k.name, k.count, k.wait, k.unflagged) == ("b", 1, 0.5, -3)
    assert Knobs().count is None


def test_every_shared_flag_is_declared_once() -> None:
    """The inputs models the commands take: a flag name belongs to one field of one model (serve's
    model re-declares --model: optional, the demo's by default; that is the one exception)."""
    from kvstack.apikey import ApiKeyInputs
    from kvstack.bench.replay.inputs import TraceInputs
    from kvstack.canary.inputs import CanaryInputs
    from kvstack.export.inputs import ExportInputs
    from kvstack.remote.source import RemoteInputs
    from kvstack.serving.plan_inputs import PlanInputs
    from kvstack.validation.inputs import ServerInputs, ValidationInputs

    owners: dict[str, str] = {}
    models = (
        PlanInputs,
        ValidationInputs,
        TraceInputs,
        RemoteInputs,
        ApiKeyInputs,
        CanaryInputs,
        ExportInputs,
    )
    for model in models:
        for field, f in model.flags().items():
            for name in f.names:
                assert name not in owners, (
                    f"{name} is declared by {owners[name]} and {model.__name__}.{field}"
                )
                owners[name] = f"{model.__name__}.{field}"
    # ServerInputs names a running server (validate, canary): its --model, --engine and --offload are
    # what that server runs, not what a plan asks for; it shares no command with PlanInputs.
    assert set(ServerInputs.flags()) == {
        "url", "engine", "cache_dir", "tiers", "lmcache", "offload", "chunk_tokens", "model"
    }  # fmt: skip


def test_bench_and_tune_share_their_replay_flags() -> None:
    """A flag both commands take is one declaration (bench/flags.py): the same Flag, one default."""
    from kvstack.bench.replay.inputs import TraceInputs
    from kvstack.bench.request import BenchRequest
    from kvstack.tune.options import TuneRequest

    bench, tune = BenchRequest.flags(), TuneRequest.flags()
    shared = ("seed", "timeout_s", "check_correctness", "block_tokens", "time_scale", "max_output_tokens")
    for name in shared:
        assert bench[name] is tune[name], name
    for name in ("seed", "timeout_s", "check_correctness", "time_scale", "max_output_tokens"):
        assert BenchRequest.model_fields[name].default == TuneRequest.model_fields[name].default, name
    for name, f in TraceInputs.flags().items():  # tune's trace is the TraceInputs'
        assert tune[name] is f
    names = [n for f in tune.values() for n in f.names]
    assert len(names) == len(set(names))


def test_a_flag_group_is_one_declaration_listed_after_a_commands_own_flags() -> None:
    """bench and tune take the SLO and the replay's flags as groups (bench/flags.py): the same fields,
    shown after each command's own; --slo-share's range is checked by the group for both."""
    from kvstack.bench.flags import LoadSlo, ReplayFlags
    from kvstack.bench.request import BenchRequest
    from kvstack.tune.options import TuneRequest

    groups = [*LoadSlo.flags(), *ReplayFlags.flags()]
    for model in (BenchRequest, TuneRequest):
        names = list(model.flags())
        assert sorted(names[-len(groups) :]) == sorted(groups), model.__name__
    assert next(iter(BenchRequest.flags())) == "url" and next(iter(TuneRequest.flags())) == "trace"
    with pytest.raises(InputError, match="--slo-share must be at most 1"):
        BenchRequest(sweep="concurrency:1,2", slo_ttft=500, slo_share=1.5)
    with pytest.raises(InputError, match="--slo-share must be at most 1"):
        TuneRequest(
            trace=Path("t.jsonl"), check_correctness=4, objective="capacity", slo_ttft=500, slo_share=1.5
        )
    bench = BenchRequest(sweep="concurrency:1,2", slo_ttft=500, slo_tpot=40)
    assert (bench.slo.ttft_s, bench.slo.tpot_s, bench.slo.share) == (0.5, 0.04, 0.9)
    with pytest.raises(InputError, match="--slo-tpot is read by --sweep only"):
        BenchRequest(slo_tpot=40)


# A name that several models declare, each with a meaning of its own (not one flag declared twice):
# a running server's --model/--engine/--offload/--cache-dir are what it runs (ServerInputs), not what
# a plan asks for; each command's --out, --run-dir, --url, --lmcache is its own; bench's trace flags
# slice after the session sample, the plan's before it; validate's --prompt-tokens and --concurrency
# are the validation pass's, bench's the workload's; export's --host/--port are the deployment's.
OTHER_MEANINGS = {
    "--cache-dir", "--concurrency", "--engine", "--host", "--lmcache", "--max-requests", "--model",
    "--offload", "--out", "--port", "--prompt-tokens", "--run-dir", "--start", "--trace",
    "--trace-sample", "--url", "--workload",
}  # fmt: skip


def test_a_flag_that_models_share_is_one_declaration() -> None:
    """Every inputs model a command takes: a flag name two of them hold is one Flag (declared once,
    as bench's and tune's replay flags, --json, or a model's fields inherited), unless the name is
    listed above with its other meanings."""
    from kvstack.apikey import ApiKeyInputs
    from kvstack.bench.replay.inputs import TraceInputs
    from kvstack.bench.request import BenchRequest
    from kvstack.canary.inputs import CanaryInputs, WatchInputs
    from kvstack.export.inputs import ExportInputs
    from kvstack.flags import Flag, JsonInputs
    from kvstack.hardware.inputs import DoctorInputs
    from kvstack.remote.source import RemoteInputs
    from kvstack.serving.plan_inputs import PlanInputs, PlanOutputInputs
    from kvstack.serving.request import ServeRequest, ServeRunInputs
    from kvstack.top.inputs import TopInputs
    from kvstack.tune.options import TuneOutputInputs, TuneRequest
    from kvstack.validation.inputs import ServerInputs, ValidateInputs, ValidationInputs

    models = (
        PlanInputs, ValidationInputs, TraceInputs, RemoteInputs, ApiKeyInputs, CanaryInputs, WatchInputs,
        ExportInputs, ServerInputs, BenchRequest, ServeRequest, TuneRequest, DoctorInputs, TopInputs,
        ValidateInputs, PlanOutputInputs, ServeRunInputs, TuneOutputInputs, JsonInputs,
    )  # fmt: skip
    declared: dict[str, set[int]] = {}
    for model in models:
        for f in model.flags().values():
            assert isinstance(f, Flag)
            for name in f.names:
                declared.setdefault(name, set()).add(id(f))
    twice = {name for name, flags in declared.items() if len(flags) > 1 and name not in OTHER_MEANINGS}
    assert not twice, f"declared more than once: {sorted(twice)}"
    assert {name for name in OTHER_MEANINGS if len(declared[name]) > 1} == OTHER_MEANINGS
