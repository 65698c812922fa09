"""`kvstack bench` through the real CLI entry point against a real local streaming server."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from kvstack.bench.report import load_result
from kvstack.cli.app import run
from tests.support.stream_server import ServerKnobs, StreamServer
from tests.support.tier_kv import SAMPLE_KV


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_bench_writes_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    with StreamServer(ServerKnobs(base_ttft_s=0.01)) as srv:
        opts = "--workload shared-prefix --requests 12 --prompt-tokens 300 --output-tokens 4 --concurrency 4"
        rc = run(["bench", "--url", srv.url + "/v1/", *opts.split(), "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "kvstack bench: shared-prefix" in captured.out and "12/12" in captured.out
    assert "prompt tokens exact (server" in captured.err
    result = load_result(out)
    assert len(result.requests) == 12 and result.layouts[0].summary.ok == 12
    assert result.config["model"] == "demo-model" and result.config["concurrency"] == 4
    assert result.layouts[0].cache.token_hit_rate and result.layouts[0].cache.token_hit_rate > 0.5
    assert {p.name for p in out.iterdir()} >= {"results.json", "requests.csv", "ttft_cdf.png"}


def test_json_output_and_no_secret_in_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    key = "sk-very-secret-123"
    with StreamServer(ServerKnobs(api_key=key)) as srv:
        opts = "--workload random --requests 3 --prompt-tokens 50 --json"
        rc = run(["bench", "--url", srv.url, "--api-key", key, *opts.split(), "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    data = json.loads(captured.out)
    assert data["config"]["api_key"] == "***" and len(data["requests"]) == 3
    assert key not in captured.out and key not in captured.err
    assert key not in (tmp_path / "results.json").read_text()


def test_wrong_api_key_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    with StreamServer(ServerKnobs(api_key="right")) as srv:
        rc = run(["bench", "--url", srv.url, "--api-key", "wrong", "--requests", "2"])
    assert rc == 2 and "--api-key" in capsys.readouterr().err


def test_nothing_listening_names_the_url(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    rc = run(["bench", "--url", url, "--out", str(tmp_path / "never")])
    err = capsys.readouterr().err
    assert rc == 2 and f"nothing is listening at {url}" in err and "Traceback" not in err
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency", "4", "--rate", "2"], "exclude each other"),
        (["--workload", "nope"], "unknown workload"),
        (["--requests", "0"], "--requests must be at least 1"),
        (["--prompt-tokens", "lots"], "--prompt-tokens must be a token count"),
        (["--rate", "0"], "--rate must be positive"),
        # A layout is an --offload choice, checked by the one rule (names.choice) for both flags.
        (
            ["--compare", "none,bogus"],
            "--compare must be one of auto, lmcache, lmcache-mp, native, hicache, none",
        ),
        (["--offload", "bogus"], "--offload must be one of"),
        # Engine arguments come after the flags are read: checked when they join the inputs.
        (["--", "--max-num-seqs", "4"], "engine arguments (--max-num-seqs 4) need a server that kvstack"),
    ],
)
def test_bad_input_exits_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with StreamServer(ServerKnobs()) as srv:
        # Without --url kvstack would serve the layouts itself: these must be refused before that.
        url = ["--url", srv.url] if "--compare" not in argv and "--offload" not in argv else []
        rc = run(["bench", *url, *argv])
        assert srv.requests == []  # refused before any request
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "hint:" in err


def test_bad_url_and_missing_url(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["bench", "--url", "ftp://example"]) == 2
    assert "not an http(s) URL" in capsys.readouterr().err
    with StreamServer(ServerKnobs()) as srv:
        assert run(["bench", "--url", srv.url, "--compare", "none"]) == 2
    assert "cannot be combined with --url" in capsys.readouterr().err


def test_all_requests_failing_exits_1_and_keeps_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with StreamServer(ServerKnobs(status=500)) as srv:
        rc = run(
            ["bench", "--url", srv.url, "--workload", "random", "--requests", "4", "--out", str(tmp_path)]
        )
    err = capsys.readouterr().err
    assert rc == 1 and "no request succeeded" in err and "HTTP 500" in err
    result = load_result(tmp_path)
    assert len(result.requests) == 4 and not any(r.ok for r in result.requests)


def test_rate_mode_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with StreamServer(ServerKnobs()) as srv:
        opts = "--workload random --requests 5 --rate 50 --prompt-tokens 40 --json"
        rc = run(["bench", "--url", srv.url, *opts.split()])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["config"]["rate"] == 50 and data["config"]["concurrency"] is None


def test_tier_overflow_rereads_come_from_the_lower_tier(capsys: pytest.CaptureFixture[str]) -> None:
    # The test server reports num_gpu_blocks x block_size = 64 x 16 = 1024 tokens and evicts the
    # oldest prompts beyond that; its "native" tier keeps everything.
    with StreamServer(ServerKnobs(num_gpu_blocks=64, block_size=16, connector="native")) as srv:
        opts = "--workload tier-overflow --prompt-tokens 256 --output-tokens 1 --json"
        rc = run(["bench", "--url", srv.url, *opts.split()])
    data = json.loads(capsys.readouterr().out)
    # One request in flight unless told otherwise: re-reads must reach the engine in fill order.
    assert rc == 0 and data["config"]["concurrency"] == 1
    shape = data["workload"]["shape"]
    assert shape["gpu_tokens"] == 1024 and shape["working_set_tokens"] > 1024
    fill, reread = data["layouts"][0]["rounds"]
    assert (fill["label"], reread["label"]) == ("fill", "re-read 1")
    assert fill["cache"]["token_hit_rate"] == 0
    by_source = reread["cache"]["cached_tokens_by_source"]
    assert by_source["host"] > 0 and by_source.get("device", 0) == 0  # the GPU pool was overflowed
    assert reread["cache"]["token_hit_rate"] > 0.5


def test_lmcache_needs_url_and_run_dir_with_url_needs_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["bench", "--lmcache", "http://127.0.0.1:8002"]) == 2
    assert "--lmcache names the cache server of a running server (--url)" in capsys.readouterr().err
    assert run(["bench", "--url", "http://127.0.0.1:1", "--run-dir", "/tmp"]) == 2
    assert "--run-dir with --url is read by --trace only" in capsys.readouterr().err


def test_bench_serves_its_layouts_on_no_shared_tier_and_takes_no_allow_mixed_tier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shared tier's refusal (serving/shared_tier_kv.py) names `kvstack serve --allow-mixed-tier`:
    bench never meets it (its layouts have no remote tier, whatever the environment names), so it
    has no such flag, and its hint names the command that has."""
    import contextlib

    from kvstack.errors import EngineError
    from kvstack.profiles import profiles_dir
    from kvstack.remote.writers import TierWriter
    from kvstack.serving import start_layout
    from kvstack.serving.prepare import Launch
    from kvstack.serving.shared_tier_kv import check_launch, mismatch_line

    seen: list[Launch] = []

    @contextlib.contextmanager
    def launched(launch: Launch, events: object = None) -> object:
        seen.append(launch)
        raise EngineError("stopped before any engine starts (test)")
        yield

    monkeypatch.setattr(start_layout, "launched", launched)
    monkeypatch.setenv("KVSTACK_REMOTE_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    hardware = str(profiles_dir() / "hardware" / "h100-sxm.json")
    argv = ["bench", "--compare", "lmcache", "--hardware", hardware, "--cache-dir", str(tmp_path / "c")]
    assert run([*argv, "--run-dir", str(tmp_path / "runs")]) == 1
    (launch,) = seen
    assert launch.plan.offload_tiers and launch.plan.tier("remote") is None
    assert launch.request.remote is None and check_launch(launch) == []
    capsys.readouterr()

    assert run(["bench", "--allow-mixed-tier"]) == 2
    assert "No such option: --allow-mixed-tier" in capsys.readouterr().err
    assert run(["serve", "--help"]) == 0
    assert "--allow-mixed-tier" in capsys.readouterr().out
    kv = SAMPLE_KV
    theirs = TierWriter(
        kv=kv.model_copy(update={"chunk_tokens": 512}), fingerprint="f", instance="h:8001", run_dir="/r",
        pid=1, since=0.0,
    )  # fmt: skip
    problem, hint = mismatch_line(kv, theirs, "redis://h:6379/0")
    assert "chunk size" in problem and hint.endswith("kvstack serve --allow-mixed-tier")
