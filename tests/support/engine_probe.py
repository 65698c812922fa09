"""Run tests/integration/engine_probe.py (vLLM's and LMCache's own parsers) in the engine's python."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

PROBE = Path(__file__).resolve().parents[1] / "integration" / "engine_probe.py"


def run_probe(py: str, job: dict[str, Any], tmp: Path, timeout_s: float) -> dict[str, Any]:
    """Write ``job`` as JSON, run the probe on it in ``py`` (a subprocess), return its result."""
    job_path, result_path = tmp / "job.json", tmp / "result.json"
    job_path.write_text(json.dumps(job), encoding="utf-8")
    proc = subprocess.run(
        [py, str(PROBE), str(job_path), str(result_path)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"engine probe failed:\n{proc.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(result_path.read_text(encoding="utf-8"))
    return result
