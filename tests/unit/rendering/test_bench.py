"""`kvstack bench`'s terminal output, rendered from a result: the tables, the error lines, the live bar,
and which report a result gets (the workload's, the replay's, or results.json itself)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from kvstack.bench.runner import Progress
from kvstack.bench.schema import BenchResult
from kvstack.rendering.bench import error_lines, print_result, rounds_table, summary_table
from kvstack.rendering.progress import ProgressView
from tests.support.bench_results import two_layouts

# What a replay adds to its result (bench/replay/trace_bench.py run_trace): what was sent, and per layout the
# predicted vs measured share of prompt tokens per tier.
TRACE = {
    "source": "t.jsonl",
    "requests_sent": 20,
    "prompt_tokens": 1280,
    "block_tokens": 32,
    "unbounded_hit_ratio": 0.625,
    "notes": ["prompts cut to whole blocks"],
    "layouts": [
        {
            "layout": "none",
            "measured_tokens": {"recomputed": 480.0, "engine_cache": 256.0},
            "hierarchy": {"levels": [{"tier": "engine_cache", "tokens": 128}]},
            "tiers": [{"tier": "engine_cache", "predicted": 0.125, "measured": 0.2, "gap_points": 7.5}],
            "ttft": {"predicted": {"p50_s": 0.0059, "p90_s": None}},
        }
    ],
}


def test_tables_render_from_the_result() -> None:
    result = two_layouts()
    console = Console(record=True, width=140)
    console.print(summary_table(result))
    console.print(rounds_table(result))
    text = console.export_text()
    assert "none" in text and "cut (cut short)" in text
    assert "9/10" in text and "80.0%" in text and "turn 1" in text
    lines = error_lines(result)
    assert "cut: cut short: engine exited with code 1" in lines
    assert "none: 1 x HTTP 500" in lines


def test_progress_bar_shows_live_counts() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    with ProgressView(enabled=True, console=console) as view:
        view.update(Progress("none", 0, "warm-up", 3, 4, 2, 1, 1))
    text = buf.getvalue()
    assert "none warm-up" in text and "3/4" in text and "errors 1" in text


def test_a_workload_report_has_its_tables_then_errors_and_files_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_result(two_layouts(), [Path("/out/results.json")], json_mode=False)
    out, err = capsys.readouterr()
    assert "kvstack bench: multi-turn" in out and "by round" in out
    assert err.splitlines() == [
        "none: 1 x HTTP 500",
        "cut: cut short: engine exited with code 1",
        "cut: 1 x HTTP 500",
        "wrote /out/results.json",
    ]


def test_a_replays_report_has_the_replays_tables_and_no_error_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = two_layouts().model_copy(update={"trace": TRACE})
    print_result(result, [Path("/out/results.json")], json_mode=False)
    out, err = capsys.readouterr()
    text = " ".join(out.split())
    assert text.startswith("trace t.jsonl: 20 requests, 1,280 prompt tokens, blocks of 32 tokens;")
    assert "an unbounded cache serves 62.5% note: prompts cut to whole blocks" in text
    assert "TTFT and prompt tokens by source" in text and "Predicted vs measured" in text
    assert "5.9 / -" in text and "12.5%" in text and "+7.5" in text
    assert "kvstack bench:" not in text
    assert err == "wrote /out/results.json\n"


def test_json_mode_prints_results_json_alone(capsys: pytest.CaptureFixture[str]) -> None:
    result = two_layouts()
    print_result(result, [Path("/out/results.json")], json_mode=True)
    out, err = capsys.readouterr()
    assert BenchResult.model_validate_json(out) == result and err == ""
