from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from kvstack.bench.report import REQUESTS_CSV, RESULTS_JSON, environment, load_result, write_report
from kvstack.bench.schema import BenchResult
from kvstack.errors import InputError
from tests.support.bench_results import two_layouts

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def result() -> BenchResult:
    return two_layouts()


def test_files_are_written_and_read_back(result: BenchResult, tmp_path: Path) -> None:
    out = tmp_path / "report"
    written = write_report(result, out)
    names = sorted(p.name for p in written)
    assert names == sorted(
        [RESULTS_JSON, REQUESTS_CSV, "ttft_cdf.png", "ttft_by_round.png", "prompt_sources.png"]
    )
    back = load_result(out)
    assert back == result
    data = json.loads((out / RESULTS_JSON).read_text())
    assert data["schema"] == "kvstack.bench/1" and len(data["requests"]) == 20
    with (out / REQUESTS_CSV).open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 20 and rows[9]["ok"] == "False" and rows[9]["error"] == "HTTP 500: boom"
    assert "itl_s" not in rows[0] and rows[0]["ttft_s"] == "0.05"
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporaries


def test_plots_are_valid_pngs(result: BenchResult, tmp_path: Path) -> None:
    import matplotlib.image

    for path in write_report(result, tmp_path):
        if path.suffix != ".png":
            continue
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_environment_names_versions_and_cpus() -> None:
    env = environment()
    assert env["kvstack"] and env["cpu_count"]
    assert set(env["engines"]) >= {"vllm", "sglang", "lmcache"}


def test_load_result_rejects_what_is_not_a_report(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        load_result(tmp_path / "missing.json")
    bad = tmp_path / "results.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(InputError, match="not a kvstack bench result"):
        load_result(tmp_path)
