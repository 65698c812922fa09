"""``kvstack bench --sweep`` through the real CLI (the typer app, in process) against a stand-in
server whose TTFT rises with the requests in flight (80 ms each, against a 200 ms SLO)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvstack.bench.sweep.report import load_sweep
from kvstack.cli.app import app, run
from tests.support.stream_server import ServerKnobs, StreamServer

SMALL = "--workload random --requests 8 --prompt-tokens 32 --output-tokens 2 --slo-ttft 200 --slo-share 0.75"


def _server() -> StreamServer:
    return StreamServer(ServerKnobs(base_ttft_s=0.002, prefill_s_per_token=0.0, ttft_s_per_in_flight=0.08))


def test_sweep_prints_a_table_and_the_capacity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # the paths written, unwrapped however long the tmp dir
    with _server() as srv:
        rc = run(
            ["bench", "--url", srv.url, "--sweep", "concurrency:1,4", *SMALL.split(), "--out", str(tmp_path)]
        )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    # 1 passes, 4 fails; --sweep-bisect 2: 2 passes, then 3 fails.
    assert "server: sweep over concurrency" in captured.out
    assert (
        "server: capacity c=2 (passes at c=2, fails at c=3); SLO 75% of requests within TTFT <= 200 ms"
        in (captured.out)
    )
    assert "c=3*" in captured.out  # the bisect steps are marked
    assert "sweep server c=4 (ladder): 8/8 ok" in captured.err and "misses the SLO" in captured.err
    unwrapped = captured.err.replace("\n", "")  # rich wraps long paths at any character
    assert "sweep_ttft_p90.png" in unwrapped and "sweep_throughput.png" in unwrapped
    result = load_sweep(tmp_path)
    assert [s.load for s in result.layouts[0].steps] == [1, 4, 2, 3]


def test_sweep_json(capsys: pytest.CaptureFixture[str]) -> None:
    with _server() as srv:
        argv = ["bench", "--url", srv.url, "--sweep", "rate:50", "--slo-tpot", "1000", "--json"]
        rc = run([*argv, "--workload", "random", "--requests", "4", "--prompt-tokens", "32"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["schema"] == "kvstack.bench.sweep/2" and data["kind"] == "rate"
    assert data["slo"] == {"ttft_s": None, "tpot_s": 1.0, "share": 0.9}
    assert data["layouts"][0]["capacity"]["status"] == "above_ladder" and len(data["requests"]) == 4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sweep", "concurrency:1,2"], "--sweep needs an SLO"),
        (["--slo-ttft", "100"], "--slo-ttft is read by --sweep only"),
        (["--slo-share", "0.5"], "--slo-share is read by --sweep only"),
        (["--sweep", "1,2", "--slo-ttft", "100"], "--sweep needs KIND:STEPS"),
        (["--sweep", "rate:0", "--slo-ttft", "100"], "--sweep steps must be positive"),
        (["--sweep", "concurrency:1", "--slo-ttft", "100", "--concurrency", "4"], "excludes --concurrency"),
        (["--sweep", "rate:1", "--slo-ttft", "100", "--rate", "4"], "excludes --concurrency and --rate"),
        (["--sweep", "rate:1", "--slo-ttft", "0"], "--slo-ttft must be positive"),
        (["--sweep", "rate:1", "--slo-tpot", "-2"], "--slo-tpot must be positive"),
        (["--sweep", "rate:1", "--slo-ttft", "9", "--slo-share", "1.5"], "--slo-share must be at most 1"),
        (
            ["--sweep", "rate:1", "--slo-ttft", "9", "--sweep-bisect", "11"],
            "--sweep-bisect must be at most 10",
        ),
        (
            ["--sweep", "rate:1", "--slo-ttft", "9", "--sweep-bisect", "-1"],
            "--sweep-bisect must be 0 or more",
        ),
        (["--sweep", "concurrency:1", "--slo-ttft", "9", "--trace", "t.jsonl"], "its ladder is rate:"),
        (["--sweep", "rate:1", "--slo-ttft", "9", "--check-correctness", "2"], "--sweep runs many"),
    ],
)
def test_bad_sweep_input_exits_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with _server() as srv:
        rc = run(["bench", "--url", srv.url, *argv])
        assert srv.requests == []  # refused before any request
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "hint:" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 2  # the error and its hint


def test_help_lists_the_sweep_flags() -> None:
    result = CliRunner().invoke(app, ["bench", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for name in ("--sweep", "--sweep-bisect", "--slo-ttft", "--slo-tpot", "--slo-share"):
        assert name in result.output
