"""The run dir's record of what ran: launch.json says which kvstack tune chose the layout (--tuned)."""

from __future__ import annotations

import json
from pathlib import Path

from kvstack.planning.tuned import TUNED_JSON, TunedLayout
from kvstack.serving.launch_files import record, record_spec
from kvstack.serving.prepare import prepare
from kvstack.serving.request import ServeRequest
from kvstack.units import GIB
from tests.support.deps import ROOT

NO_GPU = ROOT / "profiles" / "hardware" / "no-gpu.json"


def _request(tmp_path: Path, tuned: Path | None) -> ServeRequest:
    return ServeRequest(
        hardware=NO_GPU,
        cache_dir=tmp_path / "cache",
        run_dir=tmp_path / "run",
        tuned=tuned,
        validate_after_start=False,
    )


def test_launch_json_records_the_tune_that_chose_the_layout(tmp_path: Path) -> None:
    tune_dir = tmp_path / "tune"
    tune_dir.mkdir()
    chosen = TunedLayout(
        connector="lmcache-mp",
        chunk_tokens=256,
        dram_bytes=GIB,
        chosen_by="measured",
        measured={"p50_s": 0.05},
        created="2025-01-02T03:04:05Z",
        source="trace t.jsonl",
    )
    (tune_dir / TUNED_JSON).write_text(chosen.model_dump_json())
    launch = prepare(_request(tmp_path, tune_dir))
    record(launch)
    path = launch.run_dir / "launch.json"
    want = {
        "path": str((tune_dir / TUNED_JSON).resolve()),
        "created": "2025-01-02T03:04:05Z",
        "winner": "lmcache-mp, chunk 256, DRAM 1.0 GiB",
        "chosen_by": "measured",
        "objective": "p50",
    }
    assert json.loads(path.read_text())["tuned"] == want
    assert launch.replicas[0].dry_run_document()["tuned"] == want  # serve --dry-run --json shows it too
    # A unit restarted with another spec (a remote tier dropped) keeps what chose the layout.
    record_spec(launch.run_dir, launch.replicas[0].spec)
    assert json.loads(path.read_text())["tuned"] == want


def test_a_launch_without_tuned_records_no_tune(tmp_path: Path) -> None:
    launch = prepare(_request(tmp_path, None))
    record(launch)
    assert "tuned" not in json.loads((launch.run_dir / "launch.json").read_text())
