from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvstack.bench.report import load_result
from kvstack.bench.request import BenchRequest
from kvstack.bench.workload_run import normalize_url, run_bench
from kvstack.errors import EngineError, InputError, NetworkTargetError, ValidationFailed
from kvstack.serving.served_layout import ServedLayout
from tests.support.stream_server import ServerKnobs, StreamServer


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000"),
        (" https://example.com/v1 ", "https://example.com"),
    ],
)
def test_normalize_url(url: str, base: str) -> None:
    assert normalize_url(url) == base


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://h", "http://", "http://h:99999"])
def test_normalize_url_refuses(url: str) -> None:
    with pytest.raises(NetworkTargetError):
        normalize_url(url)


def test_compare_runs_each_layout_and_writes_them_side_by_side(tmp_path: Path) -> None:
    @contextlib.contextmanager
    def start(name: str) -> Iterator[ServedLayout]:
        with StreamServer(ServerKnobs(connector=None if name == "none" else "native")) as srv:
            yield ServedLayout(name, srv.url, (srv.url + "/metrics",))

    args = BenchRequest(url=None, model="demo-model", workload="long-doc-qa", requests=8, prompt_tokens="256",
                     compare=["none", "native"], out=tmp_path)  # fmt: skip
    result = run_bench(args, start_layout=start)
    assert [lay.name for lay in result.layouts] == ["none", "native"]
    back = load_result(tmp_path)
    assert [lay.name for lay in back.layouts] == ["none", "native"] and len(back.requests) == 16


def test_a_dead_engine_keeps_the_rows_in_the_report(tmp_path: Path) -> None:
    deadline: list[float] = []

    def check() -> None:
        if time.monotonic() > deadline[0]:
            raise EngineError("vllm exited with code 1 during the bench", hint="see the log")

    @contextlib.contextmanager
    def start(name: str) -> Iterator[ServedLayout]:
        with StreamServer(ServerKnobs(base_ttft_s=0.05)) as srv:
            deadline.append(time.monotonic() + 0.5)
            yield ServedLayout(name, srv.url, (), check_alive=check)

    args = BenchRequest(url=None, model="demo-model", workload="random", requests=500, prompt_tokens="64",
                     concurrency=2, compare=["none"], out=tmp_path)  # fmt: skip
    with pytest.raises(EngineError, match="exited with code 1"):
        run_bench(args, start_layout=start)
    result = load_result(tmp_path)
    (layout,) = result.layouts
    assert not layout.complete and layout.aborted and "code 1" in layout.aborted
    assert 0 < len(result.requests) < 500


def test_out_must_be_a_directory(tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        run_bench(BenchRequest(url="http://127.0.0.1:1", out=file))


def test_plan_file_errors_are_input_errors(tmp_path: Path) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text("{}")
    with StreamServer(ServerKnobs()) as srv:
        for plan in (bad, tmp_path / "missing.json"):
            with pytest.raises(InputError, match="--plan"):
                run_bench(BenchRequest(url=srv.url, workload="tier-overflow", plan_file=plan))


def test_served_tier_overflow_is_sized_by_the_first_layouts_server(tmp_path: Path) -> None:
    """Without --url or --plan, the first layout's /metrics (its cache size) sizes tier-overflow."""

    @contextlib.contextmanager
    def start(name: str) -> Iterator[ServedLayout]:
        knobs = ServerKnobs(num_gpu_blocks=64, block_size=16, connector=None if name == "none" else "native")
        with StreamServer(knobs) as srv:
            yield ServedLayout(name, srv.url, (srv.url + "/metrics",))

    args = BenchRequest(url=None, model="demo-model", workload="tier-overflow", prompt_tokens="256",
                     output_tokens=1, compare=["none", "native"], out=tmp_path)  # fmt: skip
    result = run_bench(args, start_layout=start)
    assert result.workload["shape"]["gpu_tokens"] == 1024
    assert result.workload["shape"]["working_set_tokens"] > 1024
    none, native = (lay.rounds[-1].cache.token_hit_rate for lay in result.layouts)
    assert native is not None and native > 0.5 and (none or 0.0) < native


def test_served_tier_overflow_without_cache_sizes_says_what_to_pass(tmp_path: Path) -> None:
    @contextlib.contextmanager
    def start(name: str) -> Iterator[ServedLayout]:
        with StreamServer(ServerKnobs()) as srv:
            yield ServedLayout(name, srv.url, ())  # no /metrics: no cache size to read

    args = BenchRequest(url=None, model="demo-model", workload="tier-overflow", prompt_tokens="256",
                     compare=["none"], out=tmp_path)  # fmt: skip
    with pytest.raises(InputError, match="tier-overflow needs the size of the GPU pool"):
        run_bench(args, start_layout=start)


@pytest.mark.parametrize(("corrupt", "failed"), [(None, 0), (3, 2)])
def test_check_correctness_compares_cached_answers_with_recompute(
    tmp_path: Path, corrupt: int | None, failed: int
) -> None:
    """A tier that counts hits but returns other tokens is caught; a sound one matches."""

    @contextlib.contextmanager
    def start(name: str) -> Iterator[ServedLayout]:
        knobs = ServerKnobs(num_gpu_blocks=64, block_size=16, connector="native", corrupt_tier_from=corrupt)
        with StreamServer(knobs) as srv:
            yield ServedLayout(name, srv.url, (srv.url + "/metrics",))

    args = BenchRequest(url=None, model="demo-model", workload="tier-overflow", prompt_tokens="256",
                     output_tokens=1, compare=["native"], check_correctness=2, out=tmp_path)  # fmt: skip
    if not failed:
        result = run_bench(args, start_layout=start)
        (layout,) = result.layouts
        c = layout.correctness
        assert c is not None and c.checked == 2 and c.passed == 2 and all(x.tokens == 16 for x in c.checks)
        assert c.noise_floor is not None and (c.noise_floor.answers, c.noise_floor.positions) == (2, 32)
    else:  # the answers the tier served (not those still in the engine's pool) are caught: exit 1
        with pytest.raises(ValidationFailed) as info:
            run_bench(args, start_layout=start)
        assert info.value.exit_code == 1
        assert (
            "--check-correctness: " in info.value.message
            and "cached answers of native differ" in info.value.message
        )
        c = load_result(tmp_path).layouts[0].correctness
        assert c is not None and c.failed >= 1
        bad = next(x for x in c.checks if x.verdict == "fail")
        assert bad.over == 13 and f"request {bad.request} differs" in info.value.message
        assert "(13 of 16 positions over it, first at token 4, largest 2.000" in bad.detail
    back = load_result(tmp_path)
    assert back.layouts[0].correctness == c
