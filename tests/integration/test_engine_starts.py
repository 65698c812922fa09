"""The e2e suite's engine-start counter (tests/support/engine_starts.py) on real processes: an
engine's command line counts once per test, its forks (vLLM's EngineCore before it renames itself)
not again, and other processes not at all."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tests.support.engine_starts import EngineStarts, is_engine

# An "engine" that forks a child with its own command line, as vLLM's EngineCore starts.
FORKING = "import os, time; os.fork(); time.sleep(3)"


def fake_engine(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code, "-m", "vllm.entrypoints.openai.api_server"])


def test_an_engine_and_its_fork_count_once_for_the_test_they_appear_in(tmp_path: Path) -> None:
    starts = EngineStarts(interval_s=0.05)
    try:
        starts.now("tests/e2e/test_a.py::test_one")  # the first call starts the sampling
        first = fake_engine(FORKING)
        time.sleep(1.0)
        starts.now("tests/e2e/test_b.py::test_two")
        # An engine that comes and goes between two tests' starts: only the sampling sees it.
        second = fake_engine("import time; time.sleep(0.5)")
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
        time.sleep(1.5)
        starts.now("tests/e2e/test_c.py::test_three")
    finally:
        starts.stop()
        for proc in (first, second, other):
            proc.wait(10)
    assert dict(starts.by_test) == {"tests/e2e/test_a.py::test_one": 1, "tests/e2e/test_b.py::test_two": 1}
    assert starts.by_module() == {"tests/e2e/test_a.py": 1, "tests/e2e/test_b.py": 1}
    out = tmp_path / "starts.json"
    starts.write(out)
    assert json.loads(out.read_text())["total"] == 2


def test_what_counts_as_an_engine() -> None:
    assert is_engine(["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--port", "8000"])
    assert is_engine(["/venv/bin/vllm", "serve", "model"])
    assert not is_engine(["python", "-m", "kvstack", "serve", "--model", "vllm.entrypoints.x"])
    assert not is_engine(["VLLM::EngineCore"])
    assert not is_engine([])
