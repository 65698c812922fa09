"""What ``kvstack tune`` is asked (``TuneRequest``): its flags, checked once when the request is made
(each mistake one InputError, before anything is read or started)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Self

from pydantic import Field, model_validator

from kvstack.bench.flags import (
    BLOCK_TOKENS,
    LoadSlo,
    ReplayFlags,
)
from kvstack.bench.replay.inputs import TraceInputs
from kvstack.bench.sweep.ladder import LoadLadder, parse_ladder
from kvstack.errors import InputError
from kvstack.flags import Inputs, Json, flag
from kvstack.tune.budget import DEFAULT_BUDGET, check_measuring_budget, parse_duration

if TYPE_CHECKING:
    from kvstack.serving.request import ServeRequest

DEFAULT_REPLAY_REQUESTS = 400
DEFAULT_CHECKS = 4  # cached answers judged against recompute after each replay
Objective = Literal["p50", "p90", "mean", "goodput"]  # what the model ranks by
# capacity: the highest multiple of the trace's rate a candidate sustains within the SLO, measured by
# sweeping each proven candidate (tune/capacity.py); the model ranks them by mean TTFT meanwhile.
TuneObjective = Literal["p50", "p90", "mean", "goodput", "capacity"]
RANK_OBJECTIVES: tuple[Objective, ...] = ("p50", "p90", "mean", "goodput")
OBJECTIVES: tuple[TuneObjective, ...] = (*RANK_OBJECTIVES, "capacity")
DEFAULT_MULTIPLES = "0.5,1,2,4"


def parse_knobs(texts: Sequence[str], connector: str | None) -> dict[str, float]:
    """``NAME=VALUE`` pairs, names as the connector spells them (leading dashes optional)."""
    from kvstack.tune.knobs import CONNECTORS

    found = CONNECTORS.get(connector or "")
    known = {k.name.lstrip("-"): k.name for k in found.knobs} if found is not None else {}
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


class TuneRequest(TraceInputs, LoadSlo, ReplayFlags):
    """What ``kvstack tune`` is asked, its flags as parsed: the trace's (TraceInputs'; tune reads no
    offload cost: --calibration gives it), tune's own and the replay's (bench's, declared once in
    bench/flags.py), and what the CLI sets from the engine's flags (``served_by``). Every check is
    here, when it is made (each mistake one InputError, before anything is read or started)."""

    block_tokens: Annotated[int | None, BLOCK_TOKENS] = None  # None: the trace's own
    engine_pool_tokens: Annotated[
        int | None,
        flag(
            "--engine-pool-tokens",
            help="The engine's prefix cache in tokens (default: the plan's pool).",
            ge=1,
            example="4",
        ),
    ] = None
    connector: Annotated[str | None, flag("--connector", help="Rank only this connector (and none).")] = None
    knob: Annotated[
        list[str],
        flag("--knob", help="Fix a knob of --connector: NAME=VALUE (e.g. chunk-size=512); repeatable."),
    ] = Field(default_factory=list)
    objective: Annotated[
        TuneObjective,
        flag(
            "--objective",
            help="p50, p90, mean of TTFT, goodput (requests within --slo-ms), or capacity (the multiple "
            "of the trace's rate each proven candidate sustains within --slo-ttft/--slo-tpot).",
            choices=OBJECTIVES,
        ),
    ] = "p50"
    slo_ms: Annotated[float | None, flag("--slo-ms", help="The TTFT SLO goodput counts, in ms.")] = None
    sweep_multiples: Annotated[
        str | None,
        flag(
            "--sweep-multiples",
            help=f"--objective capacity: the loads each proven candidate is swept at, in x trace rate "
            f"(a step at 2 replays the slice's arrival times / 2; 1 is always measured; default "
            f"{DEFAULT_MULTIPLES}).",
            metavar="K1,K2,...",
            show_default=False,
        ),
    ] = None
    budget: Annotated[
        str,
        flag(
            "--budget",
            help="Replay none and the best-ranked candidates on the engine until this runs out "
            "(30m, 90s, 1h; 0: rank only).",
        ),
    ] = DEFAULT_BUDGET
    replay_requests: Annotated[
        int,
        flag(
            "--replay-requests",
            help="Replay the first N requests of the trace for each candidate.",
            ge=1,
            example="4",
        ),
    ] = DEFAULT_REPLAY_REQUESTS
    max_candidates: Annotated[
        int | None,
        flag(
            "--candidates",
            help="Measure at most N candidates besides none (default: what the budget holds).",
            ge=1,
            example="4",
        ),
    ] = None
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
    # Set by code: the engines' model, its revision and the hardware (serve's flags: served_by), the
    # API key (None: the served request's).
    model: str | None = None
    revision: str | None = None
    hardware: Path | None = None
    api_key: str | None = Field(default=None, repr=False)

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.trace is None:
            raise InputError("tune needs a trace of your traffic", hint="add --trace FILE (Mooncake JSONL)")
        budget_s = self.budget_s  # a budget that is no duration is refused here
        if self.check_correctness < 1:  # bench's 0 (no check) is no proof
            raise InputError(
                f"--check-correctness must be at least 1, not {self.check_correctness}",
                hint="e.g. --check-correctness 4",
            )
        if self.out is not None and self.resume is not None and self.out != self.resume:
            raise InputError("--out and --resume name different directories", hint="--resume DIR alone")
        if self.resume is not None and budget_s == 0:
            raise InputError(
                "--resume continues measuring: --budget 0 measures nothing", hint="e.g. --budget 30m"
            )
        if self.calibration is None and budget_s == 0:
            raise InputError(
                "--budget 0 ranks without replaying anything on the engine, so it has no costs to rank "
                "with: it needs --calibration",
                hint="drop --budget 0 (tune then measures none and lmcache-mp on your engine first), or "
                "pass --calibration DIR (an earlier tune's --out DIR)",
            )
        if self.calibration is None and self.resume is None and self.measures:
            check_measuring_budget(budget_s)  # it measures its costs first
        d = self.directory
        if d is not None and d.exists() and not d.is_dir():
            raise InputError(
                f"{d} exists and is not a directory", hint="choose a directory for tune's results"
            )
        parse_knobs(self.knob, self.connector)  # a knob that is not NAME=VALUE is refused here
        self.check_capacity()
        return self

    def check_capacity(self) -> None:
        """--objective capacity and the flags only it reads."""
        given = self.slo_flags_given() + (["--sweep-multiples"] if self.sweep_multiples is not None else [])
        if self.objective != "capacity":
            if given:
                raise InputError(
                    f"{given[0]} is read by --objective capacity only", hint="add --objective capacity"
                )
            return
        if self.slo_ttft is None:
            raise InputError(
                "--objective capacity needs the TTFT SLO each step is judged by",
                hint="add --slo-ttft MS (and --slo-tpot MS, --slo-share, default 0.9)",
            )
        if self.slo_ms is not None:
            raise InputError(
                "--slo-ms is goodput's SLO; --objective capacity takes --slo-ttft (and --slo-tpot)",
                hint="drop --slo-ms",
            )
        if not self.measures:
            raise InputError(
                "--objective capacity is measured by sweeping the candidates on the engine: --budget 0 "
                "measures nothing",
                hint="give a --budget, or rank by --objective p50/p90/mean",
            )
        self.check_slo()
        self.multiples  # noqa: B018  (parsed here: a bad ladder is refused with the other flags)

    @property
    def ranking_objective(self) -> Objective:
        """What the model ranks by: the objective, or mean TTFT while capacity is measured."""
        return "mean" if self.objective == "capacity" else self.objective

    @property
    def multiples(self) -> LoadLadder:
        """--sweep-multiples as a ladder in x trace rate, 1 (the trace's own load) always in it."""
        ladder = parse_ladder("rate:" + (self.sweep_multiples or DEFAULT_MULTIPLES), "--sweep-multiples")
        return LoadLadder("trace_rate", tuple(sorted({*ladder.loads, 1.0})))

    @property
    def trace_path(self) -> Path:
        """--trace (required: checked when made)."""
        assert self.trace is not None
        return self.trace

    @property
    def budget_s(self) -> float:
        """--budget in seconds (0: rank only)."""
        return parse_duration(self.budget)

    @property
    def knobs(self) -> dict[str, float]:
        """--knob NAME=VALUE pairs, names as --connector spells them."""
        return parse_knobs(self.knob, self.connector)

    @property
    def directory(self) -> Path | None:
        return self.resume or self.out

    @property
    def measures(self) -> bool:
        """Whether it replays on engines (a budget), or only ranks (--budget 0)."""
        return self.budget_s > 0

    def served_by(self, serve: ServeRequest, extra_args: Sequence[str]) -> TuneRequest:
        """This request with the model, revision and hardware of the engines it serves (serve's
        flags), and ``extra_args`` (after --) refused when it serves none."""
        if not self.measures and extra_args:
            raise InputError(
                f"engine arguments ({' '.join(extra_args)}) are for the engines tune serves: --budget 0 "
                "serves none",
                hint="drop them, or give a --budget",
            )
        out = self.model_copy()
        out.model, out.revision, out.hardware = serve.model, serve.revision, serve.hardware
        return out


class TuneOutputInputs(Inputs):
    """How ``kvstack tune`` shows its run: the ranking's rows, or results.json."""

    top: Annotated[int, flag("--top", help="Rows of the ranking table.")] = 15
    as_json: Json
