"""``bench --sweep``'s terminal output, rendered from a SweepResult: the capacity line for each way a
sweep ends, the table per layout, the step line and the --json report."""

from __future__ import annotations

import io
import json
from typing import Literal

import pytest
from rich.console import Console

from kvstack.bench.schema import Distribution, Summary
from kvstack.bench.sweep.ladder import LoadLadder
from kvstack.bench.sweep.schema import (
    Capacity,
    Environment,
    LayoutSweep,
    Slo,
    SweepConfig,
    SweepResult,
    SweepStep,
)
from kvstack.rendering.bench_sweep import capacity_line, layout_table, print_sweep, slo_text, step_line

SLO = Slo(ttft_s=0.5, tpot_s=0.05, share=0.9)


@pytest.mark.parametrize(
    ("capacity", "text"),
    [
        (
            Capacity(status="bracketed", load=4, highest_passing=4, lowest_failing=6),
            "none: capacity c=4 (passes at c=4, fails at c=6)",
        ),
        (
            Capacity(status="above_ladder", load=8, highest_passing=8),
            "capacity above the ladder: every step up to c=8",
        ),
        (
            Capacity(status="below_first_step", lowest_failing=1),
            "capacity below the first step: c=1 already fails",
        ),
        (Capacity(status="not_measured"), "capacity not measured: no step completed"),
        (
            Capacity(
                status="bracketed", load=1, highest_passing=1, lowest_failing=2, passing_above_failure=[4]
            ),
            "passed again at c=4, above a failing step (not counted)",
        ),
    ],
)
def test_capacity_line(capacity: Capacity, text: str) -> None:
    line = capacity_line("none", "concurrency", capacity, SLO)
    assert text in line and line.endswith("SLO 90% of requests within TTFT <= 500 ms and TPOT <= 50 ms")


def test_slo_text_names_only_what_is_given() -> None:
    assert slo_text(Slo(tpot_s=0.02, share=0.95)) == "95% of requests within TPOT <= 20 ms"


def _step(step: int, load: float, ok: bool, origin: Literal["ladder", "bisect"] = "ladder") -> SweepStep:
    ttft = Distribution(n=4, mean=0.1, p50=0.1, p90=0.2, p99=0.3, min=0.05, max=0.3)
    summary = Summary(
        requests=4,
        ok=4,
        errors=0,
        wall_s=1.0,
        requests_per_s=4.0,
        output_tokens_per_s=64.0,
        prompt_tokens=400,
        expected_prefix_tokens=0,
        output_tokens=64,
        ttft_s=ttft,
    )
    return SweepStep(
        step=step,
        origin=origin,
        load=load,
        seed=step,
        complete=True,
        summary=summary,
        within_slo=4 if ok else 1,
        share_within_slo=1.0 if ok else 0.25,
        meets_slo=ok,
    )


def _result() -> SweepResult:
    steps = [_step(0, 0.5, True), _step(1, 2.0, False), _step(2, 1.0, True, "bisect")]
    lay = LayoutSweep(
        name="lmcache-mp",
        base_url="http://h",
        steps=steps,
        capacity=Capacity(status="bracketed", load=1.0, highest_passing=1.0, lowest_failing=2.0),
    )
    config = SweepConfig(
        url=None,
        model="m",
        api_key=None,
        workload="random",
        requests=4,
        prompt_tokens=100,
        output_tokens=16,
        seed=0,
        compare=["lmcache-mp"],
        ladder=[0.5, 2],
        bisect=1,
        metrics_urls=[],
        timeout_s=300,
    )
    env = Environment(kvstack="0", engines={}, python="3.11", platform="linux", cpu_count=2)
    return SweepResult(kind="rate", slo=SLO, config=config, environment=env, layouts=[lay], requests=[])


def test_layout_table_rows_by_load_with_bisect_steps_marked() -> None:
    console = Console(file=io.StringIO(), width=200)
    console.print(layout_table(_result(), _result().layouts[0]))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    lines = [ln for ln in text.splitlines() if "/s" in ln and "4/4" in ln]
    assert [ln.split()[0] for ln in lines] == ["0.5/s", "1/s*", "2/s"]
    assert "100.0%" in lines[0] and "yes" in lines[0] and "25.0%" in lines[2] and "NO" in lines[2]
    assert "200.0" in lines[0] and "64" in lines[0]  # TTFT p90 in ms; output tokens/s


def test_step_line() -> None:
    line = step_line("none", LoadLadder("rate", (2.0,)), _step(1, 2.0, False))
    assert line == "sweep none 2/s (ladder): 4/4 ok, TTFT p90 200.0 ms, 25.0% within the SLO: misses the SLO"


def test_print_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    print_sweep(_result(), [], json_mode=True)
    assert json.loads(capsys.readouterr().out)["layouts"][0]["capacity"]["load"] == 1.0
    print_sweep(_result(), [], json_mode=False)
    out = capsys.readouterr().out
    assert (
        "lmcache-mp: sweep over rate" in out
        and "lmcache-mp: capacity 1/s (passes at 1/s, fails at 2/s)" in out
    )
