"""Wrong KV in the disk tier while the real model serves a concurrent load (issue 42): every chunk
file of LMCache's disk tier flipped from then on (tests/support/kv_tamper.py BadDisk), and its
DRAM emptied through its own API as a full DRAM would have: caught by one of the first two checks
after the tamper, named for disk; the fallback restarts the engine without the tiers, marks the
directory, and a new serve refuses that directory in one line. The serve is
tests/e2e/canary_stack.py's, on its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kvstack.clients.control import CONTROL_HEADER, read_control_token
from tests.e2e.canary_stack import (
    REAL_MODEL,
    assert_fallback,
    canary_story,
    ended,
    events,
    first_fail_after,
    loaded,
    wait_for,
)
from tests.e2e.conftest import ServeSession, start_serve
from tests.support.kv_tamper import BadDisk


@pytest.fixture(scope="module")
def disk(engine_ready: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeSession]:
    with loaded(tmp_path_factory.mktemp("canary-disk")) as session:
        yield session


def test_wrong_kv_on_disk_is_caught_and_the_directory_is_refused_after(
    disk: ServeSession, tmp_path: Path
) -> None:
    wait_for(disk, "three checks", lambda: len(events(disk, "canary-check")) >= 3)
    (directory,) = [p for p in disk.cache_dir.rglob("lmcache-mp-disk") if p.is_dir()]
    token = read_control_token(disk.run_dir)
    assert token is not None
    with BadDisk(directory) as bad:
        assert bad.flipped > 0
        resp = httpx.post(disk.cache_server_url + "/cache/clear", headers={CONTROL_HEADER: token}, timeout=30)
        assert resp.status_code == 200, resp.text  # DRAM emptied, as other users' KV would have pushed it out
        t0 = time.time()  # the tamper is in place: the first two checks asked from now must catch it
        index, fail = wait_for(
            disk,
            "a failed check",
            lambda: first_fail_after(disk, t0),
            timeout_s=120,
            explain=lambda: f"{bad.flipped} chunk files flipped\n{canary_story(disk, t0)}",
        )
    assert index <= 1, f"caught at the {index + 1}th check after the tamper:\n{canary_story(disk, t0)}"
    assert fail["served_from"] == "disk", fail
    assert_fallback(disk, "disk")
    marker = directory / "KVSTACK-WRONG-KV.json"
    assert json.loads(marker.read_text())["probe"] == fail["probe"]
    # A new serve on the same cache dir is refused before it starts anything. The first serve and its
    # load stop first: a new serve measures the disk with fio, and under that load on two cores fio
    # may not finish within its bound (then a disk the kernel marks rotational, as a virtual disk
    # often is, gets no tier, the directory is not read, and nothing is refused). Any measured
    # bandwidth is worth a tier here (--min-disk-bw 1MB).
    ended(disk)
    again = ("--model", str(REAL_MODEL), "--offload", "lmcache-mp", "--cache-dir", str(disk.cache_dir))
    proc = start_serve(tmp_path, *again, "--min-disk-bw", "1MB")
    try:
        code = proc.proc.wait(120)
    finally:
        ended(proc)  # a serve that was not refused must not outlive the test
    assert code == 2, proc.output()[-3000:]
    out = proc.output()
    assert f"the tier directory {directory} served wrong KV" in out and "Traceback" not in out
