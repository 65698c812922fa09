"""`kvstack serve --model kvstack/demo`: a Hugging Face id served from a Hugging Face cache, offline.

The demo model's files are laid out as huggingface_hub caches a download (blobs, refs/main,
snapshots/<commit>); the engine is given the id, not the snapshot's path, and finds the same
snapshot through the HF_HOME it inherits.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import READY_TIMEOUT_S, start_serve, stop, wait_no_engine
from tests.support.hf_cache import add_demo

REPO_ID = "kvstack/demo"


@pytest.fixture
def short_hf_home() -> Iterator[Path]:
    """An HF_HOME with a short path. Offline, vLLM replaces the id by its snapshot's path, which
    LMCache's disk (fs) adapter puts in every file name ('/' -> '-SEP-', plus 83 characters): below
    pytest's deep tmp dirs that name passes the 255-byte limit and the disk tier stores nothing."""
    path = Path(tempfile.mkdtemp(prefix="hf-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_serve_a_cached_hub_id_offline(
    engine_ready: str, tmp_path: Path, short_hf_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hf_home = short_hf_home
    snapshot = add_demo(hf_home / "hub", REPO_ID)
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(hf_home))  # start_serve's environment is this process's
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    session = start_serve(tmp_path, "--model", REPO_ID, "--exit-after-validate")
    try:
        code = session.proc.wait(READY_TIMEOUT_S + 300)
    finally:
        if session.proc.poll() is None:
            stop(session)
        assert not wait_no_engine(session.port)
    assert code == 0, session.output()[-4000:]

    launch = json.loads((session.run_dir / "launch.json").read_text())
    argv = launch["argv"]
    assert REPO_ID in argv and str(snapshot) not in " ".join(argv)  # the id, as vLLM users give it
    assert "--load-format" not in argv  # the snapshot holds the weights
    assert argv[argv.index("--served-model-name") + 1] == REPO_ID
    plan = json.loads((session.run_dir / "plan.json").read_text())
    assert (plan["model_path"], plan["model"]["source"]) == (REPO_ID, str(snapshot))
    assert plan["model"]["checkpoint_bytes"] == (snapshot / "model.safetensors").stat().st_size

    report = json.loads((session.run_dir / "validation.json").read_text())
    assert report["overall"] == "PASS", session.output()[-4000:]
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["warm"]["verdict"] == "pass", steps["warm"]
    assert all(s["verdict"] == "pass" for n, s in steps.items() if n.startswith("tier:")), steps
    # Offline, with kvstack/demo in no other cache: an engine that answered found this snapshot.
