"""The canary's thread: an engine it cannot reach is an event in the run dir, until it is halted
(serving halts it before its engines stop: their going is no error)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from kvstack.canary.checker import CanaryConfig
from kvstack.canary.runner import CanaryRunner
from kvstack.validation.report import ValidationTarget


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def errors(run_dir: Path) -> list[dict[str, object]]:
    path = run_dir / "events.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    return [r for r in rows if r["kind"] == "canary-error"]


def test_an_unreachable_engine_is_an_error_event_until_halted(tmp_path: Path) -> None:
    target = ValidationTarget(base_url=f"http://127.0.0.1:{closed_port()}")
    runner = CanaryRunner(target, CanaryConfig(interval_s=0.2), "fallback", tmp_path)
    runner.start()
    try:
        deadline = time.monotonic() + 20
        while not errors(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        first = errors(tmp_path)
        assert first and "nothing is listening" in str(first[0]["error"])
        runner.halt()
        time.sleep(1.0)  # several retry periods (0.2 s each): a running canary would add events
        assert len(errors(tmp_path)) <= len(first) + 1  # one attempt may have been under way
        halted = len(errors(tmp_path))
        time.sleep(0.6)
        assert len(errors(tmp_path)) == halted
    finally:
        runner.stop()
    assert runner.thread is not None and not runner.thread.is_alive()
    assert json.loads((tmp_path / "canary.json").read_text())["status"] == "stopped"
