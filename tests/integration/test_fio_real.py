"""The fio probe's fallbacks and time bound, with the real fio behind a thin wrapper.

The wrapper makes fio refuse what a container or filesystem would refuse (io_uring, O_DIRECT)
or hang, and passes every other run to the real fio.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from kvstack.hardware import fio
from tests.support.deps import require_program

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _real_fio() -> None:
    require_program("fio")  # a skip naming it locally, a failure in CI


# fio's own messages when a filesystem refuses O_DIRECT (fio filesetup.c; seen in public reports).
ODIRECT_REFUSED = """fio: looks like your file system does not support direct=1/buffered=0
fio: destination does not support O_DIRECT
fio: pid=15, err=22/file:filesetup.c:805, func=open(/x), error=Invalid argument
"""


def _wrapper(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fio-wrapper"
    script.write_text(f'#!/bin/bash\nREAL={shutil.which("fio")}\n{body}\nexec "$REAL" "$@"\n')
    script.chmod(0o755)
    return str(script)


def test_io_uring_refused_falls_back_to_libaio(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    # An engine fio cannot load fails exactly as a blocked io_uring does: the job never starts.
    swap = 'args=("${@/--ioengine=io_uring/--ioengine=kvstack-blocked}"); set -- "${args[@]}"'
    wrapper = _wrapper(tmp_path, swap)
    result = fio.measure_read_bw(data, 4.0, fio=wrapper)
    assert result.bw_bytes_per_s is not None and result.bw_bytes_per_s > 0
    assert result.method is not None and result.method.startswith("fio libaio O_DIRECT")
    assert any(n.startswith("io_uring failed") for n in result.notes)
    assert list(data.iterdir()) == []


def test_odirect_refused_retries_buffered_and_says_so(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    body = (
        f'if [[ " $* " == *" --direct=1 "* ]]; then\n  cat >&2 <<\'EOF\'\n{ODIRECT_REFUSED}EOF\n  exit 1\nfi'
    )
    result = fio.measure_read_bw(data, 4.0, fio=_wrapper(tmp_path, body))
    assert result.bw_bytes_per_s is not None and result.bw_bytes_per_s > 0
    assert result.method is not None and "buffered, may include page cache" in result.method
    assert any("O_DIRECT refused" in n for n in result.notes)
    assert list(data.iterdir()) == []


def test_a_hanging_fio_is_killed_at_the_bound(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    wrapper = _wrapper(tmp_path, 'if [[ " $* " == *"--name=kvstack-seqread"* ]]; then exec sleep 60; fi')
    bound = 2.0
    start = time.monotonic()
    result = fio.measure_read_bw(data, bound, fio=wrapper)
    assert time.monotonic() - start < bound + 0.5
    assert result.bw_bytes_per_s is None
    assert result.reason is not None and "did not finish within the time bound" in result.reason
    assert list(data.iterdir()) == []


def test_a_file_error_stops_without_trying_other_engines(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    # The file vanishes before the read run and --readonly stops the real fio from making it
    # again: ENOENT, which no other engine can fix.
    body = (
        'if [[ " $* " == *"--name=kvstack-seqread"* ]]; then\n'
        '  for a in "$@"; do [[ $a == --filename=* ]] && rm -f "${a#--filename=}"; done\n'
        '  set -- "$@" --readonly\n'
        "fi"
    )
    wrapper = _wrapper(tmp_path, body)
    result = fio.measure_read_bw(data, 3.0, fio=wrapper)
    assert result.bw_bytes_per_s is None
    assert result.reason is not None and "errno 2" in result.reason
    assert result.notes == []
