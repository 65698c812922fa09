"""What a user asks ``kvstack bench`` for (``BenchRequest``: bench's flags, checked when made): a
workload bench or (``trace``) a trace replay, against ``url`` or against layouts kvstack serves.
Every combination of flags that cannot work is refused here, before a server is asked or started."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Self

from pydantic import Field, model_validator

from kvstack.bench.flags import (
    BLOCK_TOKENS,
    LoadSlo,
    ReplayFlags,
)
from kvstack.bench.sweep.ladder import LoadLadder, parse_ladder
from kvstack.errors import InputError
from kvstack.flags import OutputTokens, flag
from kvstack.names import OFFLOAD_CHOICES, choice
from kvstack.units import parse_bytes, parse_tokens

if TYPE_CHECKING:  # imported where used: `kvstack --help` imports this module, never the bench
    from kvstack.serving.start_layout import TierOverrides

MAX_BISECT = 10  # each extra step runs the whole workload once more


def check_correctness_count(k: int) -> None:
    """--check-correctness K: how many answers a recompute judges per layout."""
    if not 0 <= k <= 1000:
        raise InputError(
            f"--check-correctness must be between 0 and 1000 requests, not {k}",
            hint="e.g. --check-correctness 4",
        )


def compare_names(values: list[str]) -> list[str]:
    """``--compare a,b --compare c`` -> ``[a, b, c]``, each once, blanks dropped."""
    names: list[str] = []
    for value in values:
        for name in value.split(","):
            name = name.strip()
            if name and name not in names:
                names.append(name)
    return names


class BenchRequest(LoadSlo, ReplayFlags):
    """The flags of ``kvstack bench`` as given (sizes and counts still text, read by the properties
    below); checked when made."""

    url: Annotated[str | None, flag("--url", help="A running server, e.g. http://127.0.0.1:8000")] = None
    model: Annotated[str | None, flag("--model", help="Served model name (default: from /v1/models)")] = None
    api_key: str | None = Field(default=None, repr=False)  # ApiKeyInputs.value()
    workload: Annotated[
        str,
        flag("--workload", help="long-doc-qa, multi-turn, shared-prefix, tier-overflow or random"),
    ] = "long-doc-qa"
    requests: Annotated[int, flag("--requests", help="Requests in all (per layout)")] = 64
    concurrency: Annotated[
        int | None,
        flag(
            "--concurrency",
            help="Requests in flight at once (default 8, tier-overflow 1; excludes --rate)",
            ge=1,
            example="16",
        ),
    ] = None
    rate: Annotated[
        float | None,
        flag("--rate", help="Poisson arrivals, requests/s (seeded; excludes --concurrency)"),
    ] = None
    prompt_tokens: Annotated[str, flag("--prompt-tokens", help="Prompt length, e.g. 2048 or 8k")] = "2048"
    output_tokens: OutputTokens = 16
    compare: Annotated[
        list[str],
        flag("--compare", help="Layouts to start and compare in turn (repeat or comma-separate)"),
    ] = Field(default_factory=list)
    plan_file: Annotated[
        Path | None, flag("--plan", help="A plan JSON (kvstack plan --json) that sizes tier-overflow")
    ] = None
    metrics_urls: Annotated[
        list[str],
        flag("--metrics-url", help="Extra /metrics to read hit counters from (e.g. an LMCache server)"),
    ] = Field(default_factory=list)
    out: Annotated[Path | None, flag("--out", help="Write results.json, requests.csv and plots here")] = None
    # The one layout served when --compare names none (checked as a layout: with --url it is unused).
    offload: Annotated[str, flag("--offload", help="auto, lmcache, lmcache-mp, native, hicache or none.")] = (
        "auto"
    )
    run_dir: Annotated[
        Path | None,
        flag(
            "--run-dir",
            help="Without --url: where each layout's logs go; --trace with --url: the kvstack serve run "
            "behind it, whose tiers the replay predicts (default: the newest run serving --url)",
        ),
    ] = None
    lmcache: Annotated[
        str | None,
        flag(
            "--lmcache",
            help="With --url: LMCache's cache server HTTP address (lmcache server --http-port), e.g. "
            "http://127.0.0.1:8002: its counters say which tier served each token, and --trace sizes "
            "the tiers from its /status",
            show_default=False,
        ),
    ] = None
    trace: Annotated[
        Path | None,
        flag("--trace", help="Replay a Mooncake-format trace (JSONL: timestamp, input_length, hash_ids)"),
    ] = None
    start: Annotated[int, flag("--start", help="--trace: skip this many rows first")] = 0
    max_requests: Annotated[
        int | None, flag("--max-requests", help="--trace: replay at most this many rows (after the sample)")
    ] = None
    session_sample: Annotated[
        str | None,
        flag(
            "--session-sample",
            "--trace-sample",
            help="--trace: keep this share of sessions (0.025, 1/40, 2.5%; as plan --trace-sample)",
        ),
    ] = None
    block_tokens: Annotated[int, BLOCK_TOKENS] = 64
    l1_size: Annotated[
        str | None,
        flag("--l1-size", help="Without --url: LMCache's DRAM tier size for every layout (e.g. 64MiB)"),
    ] = None
    disk_size: Annotated[
        str | None,
        flag("--disk-size", help="Without --url: the disk tier's cap for every layout (e.g. 8MiB)"),
    ] = None
    sweep: Annotated[
        str | None,
        flag(
            "--sweep",
            help="Run the workload at each load of a ladder, e.g. concurrency:1,2,4,8 or rate:0.5,1,2,4 "
            "(excludes --concurrency and --rate), then bisect the knee; needs --slo-ttft or --slo-tpot. "
            "With --trace: rate:0.5,1,2,4 in x trace rate (a step at 2 replays the arrival times / 2)",
            metavar="KIND:LOADS",
            show_default=False,
        ),
    ] = None
    sweep_bisect: Annotated[
        int,
        flag(
            "--sweep-bisect",
            help="--sweep: extra steps bisecting between the highest load that met the SLO and the "
            "lowest that did not",
            ge=0,
            example="2",
        ),
    ] = 2
    extra_args: list[str] = Field(default_factory=list)  # for the engines kvstack starts

    @model_validator(mode="after")
    def _check(self) -> Self:
        url = self.url
        if self.concurrency is not None and self.rate is not None:
            raise InputError(
                "--concurrency and --rate exclude each other",
                hint="use --concurrency C (closed loop) or --rate R (Poisson arrivals), not both",
            )
        check_correctness_count(self.check_correctness)
        self.check_sweep()
        if compare_names(self.compare) and url:
            raise InputError(
                "--compare starts its own servers and cannot be combined with --url",
                hint="drop --url, or bench the running server alone",
            )
        self.check_engine_args()
        sizes = self.sizes
        if self.lmcache and not url:
            raise InputError(
                "--lmcache names the cache server of a running server (--url); a layout kvstack "
                "serves is known already",
                hint="drop --lmcache, or add --url",
            )
        if url and self.run_dir is not None and self.trace is None:
            raise InputError(
                "--run-dir with --url is read by --trace only (the serve run behind the server)",
                hint="drop --run-dir, or add --trace FILE",
            )
        if url and not sizes.empty:
            raise InputError(
                "--l1-size/--disk-size size the tiers of a server kvstack starts, not --url",
                hint="drop --url, or size the server you started",
            )
        sizes.check()
        self.layouts()  # each an --offload choice: refused here, before the CLI reads --engine
        return self

    def check_sweep(self) -> None:
        """--sweep and its SLO: what a sweep needs, and what only a sweep reads."""
        slo_flags = self.slo_flags_given()
        if self.sweep is None:
            if slo_flags:
                raise InputError(f"{slo_flags[0]} is read by --sweep only", hint="add --sweep KIND:LOADS")
            return
        self.ladder  # noqa: B018  (parsed here: a bad ladder is refused with the other flags)
        if self.concurrency is not None or self.rate is not None:
            raise InputError(
                "--sweep sets the load of each step: it excludes --concurrency and --rate",
                hint="drop --concurrency/--rate; the ladder names them, e.g. --sweep concurrency:1,2,4",
            )
        if self.trace is not None:
            self.check_trace_sweep()
        if self.check_correctness:
            raise InputError(
                "--check-correctness judges one load; --sweep runs many",
                hint="drop --check-correctness, or check at one --concurrency",
            )
        if self.slo_ttft is None and self.slo_tpot is None:
            raise InputError(
                "--sweep needs an SLO to find the capacity against",
                hint="add --slo-ttft MS and/or --slo-tpot MS (and --slo-share, default 0.9)",
            )
        if self.sweep_bisect > MAX_BISECT:
            raise InputError(
                f"--sweep-bisect must be at most {MAX_BISECT} steps, not {self.sweep_bisect}",
                hint="e.g. --sweep-bisect 2",
            )
        self.check_slo()

    def check_trace_sweep(self) -> None:
        """--trace with --sweep: multiples of the trace's own rate, on its clock."""
        ladder = parse_ladder(self.sweep or "")
        if ladder.kind != "rate":
            raise InputError(
                "--trace --sweep replays the trace at multiples of its own rate: its ladder is rate:, "
                f"not {ladder.kind}:",
                hint="e.g. --sweep rate:0.5,1,2,4 (x the trace's rate)",
            )
        if self.time_scale == 0:
            raise InputError(
                "--time-scale 0 sends the trace back to back: it has no rate for --sweep to multiply",
                hint="drop --time-scale (load 1 is the trace's own clock), or give a positive one",
            )

    @property
    def ladder(self) -> LoadLadder | None:
        """--sweep as its loads (None: no sweep); with --trace, multiples of the trace's rate."""
        if self.sweep is None:
            return None
        ladder = parse_ladder(self.sweep)
        return ladder.of_trace() if self.trace is not None else ladder

    def with_key_and_engine_args(self, api_key: str | None, extra_args: list[str]) -> BenchRequest:
        """These inputs with what their flags do not hold: the API key and the engine arguments after
        ``--`` (checked: the rest was when the flags were read)."""
        given = self.model_copy()
        given.api_key, given.extra_args = api_key, extra_args
        given.check_engine_args()
        return given

    def check_engine_args(self) -> None:
        if self.url and self.extra_args:
            raise InputError(
                f"engine arguments ({' '.join(self.extra_args)}) need a server that kvstack starts, "
                "not --url",
                hint="drop --url, or pass them to the server you started",
            )

    @property
    def sizes(self) -> TierOverrides:
        """--l1-size/--disk-size: the offload tiers of every layout kvstack serves."""
        from kvstack.serving.start_layout import TierOverrides

        return TierOverrides(
            cpu_bytes=parse_bytes(self.l1_size, "--l1-size") if self.l1_size else None,
            disk_bytes=parse_bytes(self.disk_size, "--disk-size") if self.disk_size else None,
        )

    def layouts(self) -> list[str]:
        """The layouts kvstack serves in turn (--compare, else --offload); none with --url."""
        if self.url:
            return []
        names = compare_names(self.compare)
        flag = "--compare" if names else "--offload"  # a layout is an --offload choice
        return [choice(n, OFFLOAD_CHOICES, flag) for n in names or [self.offload]]

    @property
    def prompt_token_count(self) -> int:
        """--prompt-tokens as a count (``8k`` -> 8192)."""
        return parse_tokens(self.prompt_tokens, "--prompt-tokens")

    @property
    def all_metrics_urls(self) -> list[str]:
        """--metrics-url, then --lmcache's (the cache server's counters are read as its /metrics)."""
        return [*self.metrics_urls, *([self.lmcache] if self.lmcache else [])]
