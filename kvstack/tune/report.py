"""What a tune run keeps: results.json (every candidate, predicted) and tuned.json (the winner, as
`serve --tuned` and `export --tuned` read it: planning/tuned.py). Pure: documents, no files."""

from __future__ import annotations

from typing import Any

from kvstack.planning.tuned import TunedLayout
from kvstack.tune.rank import Prediction
from kvstack.tune.run import TuneResult

RESULTS_JSON = "results.json"


def tuned_layout(p: Prediction, objective: str, source: str) -> TunedLayout:
    c = p.candidate
    return TunedLayout(
        connector=c.connector,  # type: ignore[arg-type]  # a connector knobs.CONNECTORS names
        chunk_tokens=c.chunk_tokens,
        dram_bytes=c.dram_bytes,
        disk_bytes=c.disk_bytes,
        knobs=c.knobs(),
        gate_tokens=c.gate.tokens if c.gate is not None and c.gate.kind == "prompt" else None,
        not_settable=c.not_settable,
        objective=objective,
        predicted={"p50_s": p.p50_s, "p90_s": p.p90_s, "mean_s": p.mean_s},
        source=source,
    )


def _row(rank: int, p: Prediction) -> dict[str, Any]:
    c = p.candidate
    return {
        "rank": rank,
        "label": c.label,
        "connector": c.connector,
        "knobs": c.knobs(),
        "sizes_from": c.sizes,
        "gate": None
        if c.gate is None
        else {"kind": c.gate.kind, "tokens": c.gate.tokens, "from": c.gate.why},
        "not_settable": c.not_settable,
        "predicted": {"p50_s": p.p50_s, "p90_s": p.p90_s, "mean_s": p.mean_s},
        "prompt_tokens": p.tokens,
        "gated_requests": p.gated,
    }


def results_document(result: TuneResult, source: dict[str, Any]) -> dict[str, Any]:
    s, lim = result.sizes, result.limits
    return {
        "kind": "kvstack-tune",
        "objective": result.objective,
        "source": source,
        "limits": {
            "platform": lim.platform,
            "engine_block_tokens": lim.engine_block_tokens,
            "engine_pool_tokens": lim.engine_pool_tokens,
            "bytes_per_token": lim.bytes_per_token,
            "dram_max_bytes": lim.dram_max_bytes,
            "disk_max_bytes": lim.disk_max_bytes,
        },
        "curve_sizes": {"knee_bytes": s.knee, "p95_bytes": s.p95, "max_bytes": s.max},
        "winner": result.winner.candidate.label,
        "baseline": _row(result.ranked.index(result.baseline) + 1, result.baseline),
        "candidates": [_row(i + 1, p) for i, p in enumerate(result.ranked)],
        "measured": None,  # the proof by replay is not run yet (see the README)
    }
