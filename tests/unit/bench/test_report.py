from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from rich.console import Console

from kvstack.bench.report import (
    REQUESTS_CSV,
    RESULTS_JSON,
    environment,
    error_lines,
    load_result,
    rounds_table,
    summary_table,
    write_report,
)
from kvstack.bench.schema import BenchResult, CacheStats, LayoutResult, RequestRow, RoundResult
from kvstack.bench.stats import summarize
from kvstack.errors import InputError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _rows(layout: str, base: float) -> list[RequestRow]:
    rows = []
    for i in range(10):
        ok = i != 9
        rows.append(
            RequestRow(
                layout=layout,
                id=f"{layout}-{i}",
                index=i,
                round=i // 5,
                turn=i // 5,
                group=f"user{i % 5}",
                prompt_tokens=100 + 10 * (i // 5),
                expected_prefix_tokens=0 if i < 5 else 90,
                ok=ok,
                status=200 if ok else 500,
                error=None if ok else "HTTP 500: boom",
                start_s=0.01 * i,
                ttft_s=base * (1 + i % 5) if ok else None,
                tpot_s=0.002 if ok else None,
                e2e_s=base * 2 + 0.01,
                itl_s=[0.002, 0.002] if ok else [],
                server_prompt_tokens=101 if ok else None,
                output_tokens=3 if ok else 0,
            )
        )
    return rows


def _layout(name: str, rows: list[RequestRow], hit: float | None) -> LayoutResult:
    rounds = [
        RoundResult(
            round=r,
            label=f"turn {r}",
            summary=summarize([x for x in rows if x.round == r]),
            cache=CacheStats(token_hit_rate=hit),
        )
        for r in (0, 1)
    ]
    return LayoutResult(
        name=name,
        base_url="http://127.0.0.1:1",
        metrics_urls=[],
        started_at=1.0,
        complete=name != "cut",
        aborted=None if name != "cut" else "engine exited with code 1",
        summary=summarize(rows),
        cache=CacheStats(engine="vllm", token_hit_rate=hit),
        rounds=rounds,
    )


@pytest.fixture
def result() -> BenchResult:
    a, b = _rows("none", 0.05), _rows("cut", 0.01)
    return BenchResult(
        config={"url": "http://127.0.0.1:1", "api_key": None},
        environment=environment(),
        workload={"spec": {"name": "multi-turn"}, "rounds": ["turn 0", "turn 1"]},
        layouts=[_layout("none", a, None), _layout("cut", b, 0.8)],
        requests=a + b,
    )


def test_files_are_written_and_read_back(result: BenchResult, tmp_path: Path) -> None:
    out = tmp_path / "report"
    written = write_report(result, out)
    names = sorted(p.name for p in written)
    assert names == sorted(
        [RESULTS_JSON, REQUESTS_CSV, "ttft_cdf.png", "ttft_by_round.png", "prompt_sources.png"]
    )
    back = load_result(out)
    assert back == result
    data = json.loads((out / RESULTS_JSON).read_text())
    assert data["schema"] == "kvstack.bench/1" and len(data["requests"]) == 20
    with (out / REQUESTS_CSV).open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 20 and rows[9]["ok"] == "False" and rows[9]["error"] == "HTTP 500: boom"
    assert "itl_s" not in rows[0] and rows[0]["ttft_s"] == "0.05"
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporaries


def test_plots_are_valid_pngs(result: BenchResult, tmp_path: Path) -> None:
    import matplotlib.image

    for path in write_report(result, tmp_path):
        if path.suffix != ".png":
            continue
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_environment_names_versions_and_cpus() -> None:
    env = environment()
    assert env["kvstack"] and env["cpu_count"]
    assert set(env["engines"]) >= {"vllm", "sglang", "lmcache"}


def test_tables_render_from_the_result(result: BenchResult) -> None:
    console = Console(record=True, width=140)
    console.print(summary_table(result))
    console.print(rounds_table(result))
    text = console.export_text()
    assert "none" in text and "cut (cut short)" in text
    assert "9/10" in text and "80.0%" in text and "turn 1" in text
    lines = error_lines(result)
    assert "cut: cut short: engine exited with code 1" in lines
    assert "none: 1 x HTTP 500" in lines


def test_load_result_rejects_what_is_not_a_report(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        load_result(tmp_path / "missing.json")
    bad = tmp_path / "results.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(InputError, match="not a kvstack bench result"):
        load_result(tmp_path)
