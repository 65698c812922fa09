"""A tune's options: ``TuneInputs.options`` turns tune's flags as parsed into a ``TuneRequest``,
checked (each mistake one InputError, before anything is read or started)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from kvstack.errors import InputError
from kvstack.flags import Inputs, flag
from kvstack.tune.budget import check_measuring_budget

DEFAULT_REPLAY_REQUESTS = 400
DEFAULT_CHECKS = 4  # cached answers judged against recompute after each replay
Objective = Literal["p50", "p90", "mean", "goodput"]
OBJECTIVES: tuple[Objective, ...] = ("p50", "p90", "mean", "goodput")


@dataclass(frozen=True)
class TuneRequest:
    trace: Path
    calibration: Path | None = None  # None: a measuring tune measures its own (none + lmcache-mp)
    sample: str | None = None
    start: int = 0
    max_requests: int | None = None
    block_tokens: int | None = None
    model: str | None = None
    revision: str | None = None
    hardware: Path | None = None
    engine_pool_tokens: int | None = None
    connector: str | None = None
    knobs: dict[str, float] = field(default_factory=dict)
    objective: Objective = "p50"
    slo_ms: float | None = None
    out: Path | None = None
    resume: Path | None = None
    budget_s: float = 1800.0
    replay_requests: int = DEFAULT_REPLAY_REQUESTS
    max_candidates: int | None = None
    max_output_tokens: int = 16
    time_scale: float = 0.0
    seed: int = 0
    check_k: int = DEFAULT_CHECKS
    api_key: str | None = None  # None: the served request's (a measuring tune's --api-key)
    timeout_s: float = 300.0

    @property
    def directory(self) -> Path | None:
        return self.resume or self.out

    @property
    def measures(self) -> bool:
        """Whether it replays on engines (a budget), or only ranks (--budget 0)."""
        return self.budget_s > 0

    def check(self) -> None:
        for name, value in (
            ("--block-tokens", self.block_tokens),
            ("--engine-pool-tokens", self.engine_pool_tokens),
            ("--replay-requests", self.replay_requests),
            ("--candidates", self.max_candidates),
            ("--max-output-tokens", self.max_output_tokens),
            ("--check-correctness", self.check_k),
        ):
            if value is not None and value < 1:
                raise InputError(f"{name} must be at least 1, not {value}", hint=f"e.g. {name} 4")
        if self.budget_s < 0:
            raise InputError(
                "--budget must be 0 or more", hint="e.g. --budget 30m (0: rank without measuring)"
            )
        if self.time_scale < 0:
            raise InputError(f"--time-scale must be 0 or more, not {self.time_scale:g}", hint="e.g. 0")
        if self.out is not None and self.resume is not None and self.out != self.resume:
            raise InputError("--out and --resume name different directories", hint="--resume DIR alone")
        if self.resume is not None and self.budget_s == 0:
            raise InputError(
                "--resume continues measuring: --budget 0 measures nothing", hint="e.g. --budget 30m"
            )
        if self.calibration is None and self.budget_s == 0:
            raise InputError(
                "--budget 0 ranks without replaying anything on the engine, so it has no costs to rank "
                "with: it needs --calibration",
                hint="drop --budget 0 (tune then measures none and lmcache-mp on your engine first), or "
                "pass --calibration DIR (an earlier tune's --out DIR)",
            )
        if self.calibration is None and self.resume is None and self.measures:
            check_measuring_budget(self.budget_s)  # it measures its costs first
        d = self.directory
        if d is not None and d.exists() and not d.is_dir():
            raise InputError(
                f"{d} exists and is not a directory", hint="choose a directory for tune's results"
            )


def parse_knobs(texts: Sequence[str], connector: str | None) -> dict[str, float]:
    """``NAME=VALUE`` pairs, names as the connector spells them (leading dashes optional)."""
    from kvstack.tune.knobs import CONNECTORS

    known = (
        {k.name.lstrip("-"): k.name for k in CONNECTORS[connector].knobs} if connector in CONNECTORS else {}
    )
    out: dict[str, float] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        if not sep or not name.strip() or number != number:
            raise InputError(
                f"--knob {text!r} is not NAME=VALUE with a number", hint="e.g. --knob chunk-size=512"
            )
        out[known.get(name.strip().lstrip("-"), name.strip())] = number
    return out


class TuneInputs(Inputs):
    """tune's own flags (the trace's are replay.inputs.TraceInputs', the engine's ServeRequest's)."""

    block_tokens: Annotated[
        int | None,
        flag("--block-tokens", help="Scale the trace's blocks to this many tokens (as bench --trace)."),
    ] = None
    engine_pool_tokens: Annotated[
        int | None,
        flag("--engine-pool-tokens", help="The engine's prefix cache in tokens (default: the plan's pool)."),
    ] = None
    connector: Annotated[str | None, flag("--connector", help="Rank only this connector (and none).")] = None
    knob: Annotated[
        list[str],
        flag("--knob", help="Fix a knob of --connector: NAME=VALUE (e.g. chunk-size=512); repeatable."),
    ] = Field(default_factory=list)
    objective: Annotated[
        str,
        flag(
            "--objective",
            help="p50, p90, mean of TTFT, or goodput (requests within --slo-ms).",
            choices=OBJECTIVES,
        ),
    ] = "p50"
    slo_ms: Annotated[float | None, flag("--slo-ms", help="The TTFT SLO goodput counts, in ms.")] = None
    budget: Annotated[
        str,
        flag(
            "--budget",
            help="Replay none and the best-ranked candidates on the engine until this runs out "
            "(30m, 90s, 1h; 0: rank only).",
        ),
    ] = "30m"
    replay_requests: Annotated[
        int, flag("--replay-requests", help="Replay the first N requests of the trace for each candidate.")
    ] = DEFAULT_REPLAY_REQUESTS
    candidates: Annotated[
        int | None,
        flag(
            "--candidates", help="Measure at most N candidates besides none (default: what the budget holds)."
        ),
    ] = None
    check_correctness: Annotated[
        int,
        flag(
            "--check-correctness",
            metavar="K",
            help="After each replay, judge K cached answers against recompute (bench --check-correctness).",
        ),
    ] = DEFAULT_CHECKS
    max_output_tokens: Annotated[
        int, flag("--max-output-tokens", help="Cap on each replayed request's output (as bench --trace).")
    ] = 16
    time_scale: Annotated[
        float,
        flag(
            "--time-scale",
            help="Arrival = trace timestamp x this (default 0: back to back; one request in flight, "
            "so a request's TTFT starts when it is sent either way).",
        ),
    ] = 0.0
    seed: Annotated[int, flag("--seed", help="Same seed, same token prompts (as bench --trace).")] = 0
    resume: Annotated[
        Path | None,
        flag("--resume", help="Continue a stopped tune in its --out DIR from the candidates measured."),
    ] = None
    out: Annotated[
        Path | None,
        flag(
            "--out",
            help="Write results.json, tuned.json, the PNGs and each candidate's run dir here "
            "(default when measuring: a new tune-* dir under kvstack's runs).",
        ),
    ] = None
    timeout_s: Annotated[float, flag("--timeout", help="Per-request timeout, seconds.")] = 300.0

    def options(
        self,
        *,
        trace: Path | None,
        trace_sample: str | None,
        start: int,
        max_requests: int | None,
        calibration: Path | None,
        model: str | None,
        revision: str | None,
        hardware: Path | None,
        extra_args: Sequence[str],
    ) -> TuneRequest:
        """The tune these flags ask for, with the trace's and the model's, checked (each mistake
        one InputError, before anything is read or started)."""
        from kvstack.tune.budget import parse_duration

        if trace is None:
            raise InputError("tune needs a trace of your traffic", hint="add --trace FILE (Mooncake JSONL)")
        budget_s = parse_duration(self.budget)
        request = TuneRequest(
            trace=trace, calibration=calibration, sample=trace_sample, start=start,
            max_requests=max_requests, block_tokens=self.block_tokens, model=model, revision=revision,
            hardware=hardware, engine_pool_tokens=self.engine_pool_tokens, connector=self.connector,
            knobs=parse_knobs(self.knob, self.connector), objective=self.objective,  # type: ignore[arg-type]
            slo_ms=self.slo_ms, out=self.out, resume=self.resume, budget_s=budget_s,
            replay_requests=self.replay_requests, max_candidates=self.candidates,
            max_output_tokens=self.max_output_tokens, time_scale=self.time_scale, seed=self.seed,
            check_k=self.check_correctness, timeout_s=self.timeout_s,
        )  # fmt: skip
        request.check()
        if not request.measures and extra_args:
            raise InputError(
                f"engine arguments ({' '.join(extra_args)}) are for the engines tune serves: --budget 0 "
                "serves none",
                hint="drop them, or give a --budget",
            )
        return request
