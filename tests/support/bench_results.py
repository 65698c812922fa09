"""A bench result of two layouts over two rounds, one layout cut short, with an error in each:
what the report's files and the terminal's tables are tested on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvstack.bench.report import RESULTS_JSON, environment
from kvstack.bench.schema import BenchResult, CacheStats, LayoutResult, RequestRow, RoundResult
from kvstack.bench.stats import summarize


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


def two_layouts() -> BenchResult:
    a, b = _rows("none", 0.05), _rows("cut", 0.01)
    return BenchResult(
        config={"url": "http://127.0.0.1:1", "api_key": None},
        environment=environment(),
        workload={"spec": {"name": "multi-turn"}, "rounds": ["turn 0", "turn 1"]},
        layouts=[_layout("none", a, None), _layout("cut", b, 0.8)],
        requests=a + b,
    )


def write_trace_result(directory: Path, compared: list[dict[str, Any]]) -> Path:
    """A bench --trace result in ``directory`` (its results.json): one finished layout, and
    ``compared`` as the trace's per-layout comparison (what offload costs and calibrations read)."""
    layout = LayoutResult(
        name="none", base_url="http://127.0.0.1:1", metrics_urls=[], started_at=1_764_000_000.0,
        complete=True, summary=summarize([]), cache=CacheStats(),
    )  # fmt: skip
    result = BenchResult(
        config={}, environment={}, workload={}, layouts=[layout], requests=[], trace={"layouts": compared}
    )
    (directory / RESULTS_JSON).write_text(result.model_dump_json(by_alias=True))
    return directory
