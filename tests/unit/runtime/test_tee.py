"""The log tee with real child processes: a failed write never stops the draining; fatal patterns
match the process's own records, never request text."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvstack.engines.lmcache import ENGINE_MP_FATAL, SERVER_FATAL
from kvstack.runtime.specs import LaunchSpec, ProcessSpec
from kvstack.runtime.status import SupervisorStatus, format_status
from kvstack.runtime.supervisor import Supervisor
from kvstack.runtime.tee import ANSI, LogTee, record_message

PY = sys.executable
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "logs"
# Text that every fatal pattern matches, as a client could put it in a prompt, a stop string or
# (by asking for it) the model's output.
EVERY_PATTERN = (
    "Address already in use; No handler registered for operation x; "
    "LMCache server did not respond to y within 5s; LMCache server is unhealthy"
)
# What vLLM logs with --enable-log-requests (vllm/entrypoints/serve/utils/request_logger.py):
# the prompt at DEBUG (%r), the params (stop strings) and the output at INFO.
REQUEST_LINES = [
    f"(APIServer pid=4242) DEBUG 11-23 21:00:00 [request_logger.py:55] Request cmpl-1 details: "
    f"prompt: {EVERY_PATTERN!r}, prompt_token_ids: [1, 2], prompt_embeds shape: None.",
    f"(APIServer pid=4242) INFO 11-23 21:00:00 [request_logger.py:65] Received request cmpl-1: "
    f"params: SamplingParams(n=1, stop=[{EVERY_PATTERN!r}]), lora_request: None.",
    f"(APIServer pid=4242) INFO 11-23 21:00:01 [request_logger.py:122] Generated response cmpl-1: "
    f"output: {EVERY_PATTERN!r}, finish_reason: stop",
    f'INFO:     127.0.0.1:51240 - "POST /v1/completions HTTP/1.1" 200 OK {EVERY_PATTERN}',
    f"[2026-11-23 21:00:01,120] LMCache INFO: stored prompt {EVERY_PATTERN} (x.py:1:lmcache.x)",
    f"  {EVERY_PATTERN}",  # a continuation line, a print of the engine's
]
# The process's own records, as LMCache and vLLM write them.
OWN_RECORDS = [
    "[2026-11-22 04:12:33,120] LMCache ERROR: No handler registered for operation "
    "register_kv_cache_engine_driven_context (mq.py:800:lmcache.v1.multiprocess.transport)",
    "\x1b[33m[2026-11-22 04:12:40,001] LMCache WARNING:\x1b[0m LMCache server is unhealthy — entering "
    "degraded mode (vllm_multi_process_adapter.py:614:lmcache.integration.vllm)",
    "(EngineCore_DP0 pid=31) ConnectionError: LMCache server did not respond to register_kv_caches within "
    "30s. Is the server running?",
    "OSError: [Errno 98] Address already in use",
    "zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:8001')",
    "(APIServer pid=12) ERROR 11-23 21:00:00 [api_server.py:90] [Errno 98] Address already in use",
]
PATTERNS = SERVER_FATAL + ENGINE_MP_FATAL


def test_request_text_is_never_a_record_of_the_process() -> None:
    assert [record_message(line) for line in REQUEST_LINES] == [None] * len(REQUEST_LINES)


def test_the_processs_own_warning_and_error_records_are() -> None:
    messages = [record_message(line) for line in OWN_RECORDS]
    assert all(m is not None for m in messages), messages
    assert messages[0] is not None and messages[0].startswith("No handler registered")
    assert messages[3] == "[Errno 98] Address already in use"


def test_real_logs_records_are_found() -> None:
    """Lines of real runs (tests/fixtures/logs): the LMCache ERROR record is one, the banner is not."""
    lines = (FIXTURES / "lmcache_disk_full.log").read_text().splitlines()
    found = [m for m in map(record_message, lines) if m is not None]
    assert any("No space left on device" in m for m in found)
    plain = (FIXTURES / "vllm_plain.log").read_text().splitlines()
    assert not any(
        record_message(line) for line in plain if " INFO " in line and line.startswith("(APIServer")
    )


PRINTER = """
import sys, time
for line in sys.argv[1:]:
    print(line, flush=True)
time.sleep(600)
"""


def launch_spec(server: ProcessSpec) -> LaunchSpec:
    return LaunchSpec(
        engine="vllm", connector="none", server=server, base_url="http://127.0.0.1:1", served_model_name="m"
    )


def printer(tmp_path: Path, lines: list[str]) -> ProcessSpec:
    path = tmp_path / "printer.py"
    path.write_text(textwrap.dedent(PRINTER))
    return ProcessSpec(name="engine", argv=[PY, str(path), *lines], fatal_patterns=PATTERNS)


def wait_lines(sup: Supervisor, n: int) -> None:
    deadline = time.monotonic() + 20
    while len(sup.tail(n=1000)) < n:
        assert time.monotonic() < deadline, sup.tail()
        time.sleep(0.05)


def test_a_served_request_naming_every_pattern_does_not_end_the_run(tmp_path: Path) -> None:
    """A real child logs the request lines: still serving; then its own record: fatal, quoted."""
    with Supervisor(launch_spec(printer(tmp_path, REQUEST_LINES)), tmp_path / "run") as sup:
        sup.start()
        wait_lines(sup, len(REQUEST_LINES))
        time.sleep(0.3)
        assert sup.poll_died() is None
    for record in OWN_RECORDS:  # each alone is fatal
        with Supervisor(launch_spec(printer(tmp_path, [*REQUEST_LINES, record])), tmp_path / "run2") as sup:
            sup.start()
            wait_lines(sup, len(REQUEST_LINES) + 1)
            assert sup.poll_died() is not None
            assert sup.fatal_line("engine") == ANSI.sub("", record).strip()


# Writes far more than a pipe holds (64 KiB), then says it is done and waits.
FLOOD = """
import sys
chunk = "x" * 1000
for i in range(int(sys.argv[1])):
    print(f"{i} {chunk}", flush=True)
print("flood done", flush=True)
"""


def test_a_log_that_cannot_be_written_is_drained_counted_and_never_blocks_the_child(tmp_path: Path) -> None:
    """/dev/full: every write fails with ENOSPC, as on a full filesystem; the child still finishes."""
    child = subprocess.Popen([PY, "-c", FLOOD, "3000"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert child.stdout is not None
    with open("/dev/full", "ab") as log:
        tee = LogTee(child.stdout, log, secrets=[])
        tee.start()
        assert child.wait(timeout=30) == 0  # 3 MB through a 64 KiB pipe: drained all along
        tee.join(timeout=10)
    dropped, why = tee.drops()
    assert dropped == 3001 and why is not None and "No space left on device" in why
    assert tee.last(1) == ["flood done"]


@contextlib.contextmanager
def full_tmpfs(path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs mounted at ``path`` and filled (needs root)."""
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)], check=False)
    if mounted.returncode != 0:
        pytest.skip("this container cannot mount a tmpfs")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path: Path) -> None:
    with contextlib.suppress(OSError), open(path / "filler", "wb") as fh:
        while True:
            fh.write(b"\0" * 4096)
            fh.flush()


def test_a_full_run_dir_drops_log_lines_and_says_so_in_status(tmp_path: Path) -> None:
    """A real filesystem full (tmpfs): the supervised child finishes, the drop shows in status."""
    statuses: list[SupervisorStatus] = []
    with full_tmpfs(tmp_path / "mnt") as mnt:
        run_dir = mnt / "run"
        run_dir.mkdir()
        flood = ProcessSpec(name="engine", argv=[PY, "-c", FLOOD, "2000"])
        with Supervisor(launch_spec(flood), run_dir, on_status=statuses.append) as sup:
            (run_dir / "engine.log").touch()
            fill(mnt)
            sup.start()
            deadline = time.monotonic() + 30
            while sup.procs[0].popen.poll() is None:
                assert time.monotonic() < deadline, "the child blocked on its output"
                time.sleep(0.1)
            sup.procs[0].tee.join(timeout=10)
            drops = sup.log_drops()
            status = sup.status()
        assert [(name, n) for name, n, _, _ in drops] == [("engine", 2001)]
        assert drops[0][2] is not None and "No space left" in drops[0][2]
        assert status.dropped_lines == 2001 and "[2001 log lines dropped]" in format_status(status)
        assert sup.tail(n=1) == ["flood done"]
