"""Sequential read bandwidth of a directory's disk, measured with fio within a time bound.

1 MiB sequential reads with O_DIRECT (so the page cache does not flatter the disk), queue depth 32:
io_uring first, then libaio, then psync, because containers often block io_uring. A filesystem that
refuses O_DIRECT gets a buffered run, and the result says so. The test file is always removed, and
the whole probe (laying out the file included) stays within ``seconds``: fio is killed when it runs
past the deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

ENGINES = ("io_uring", "libaio", "psync")
INSTALL_HINT = "install fio: sudo apt-get install fio (Debian/Ubuntu) or sudo dnf install fio"
MIB = 1024 * 1024
_MIN_FILE = 64 * MIB
_MAX_FILE = 1024 * MIB
# errno values that no other engine can fix: missing dir, permission, EISDIR, ENOSPC, EROFS, EDQUOT.
_FILE_ERRORS = frozenset({2, 13, 21, 28, 30, 122})
_EINVAL = 22


@dataclass
class FioRun:
    """What one fio invocation reported."""

    bw_bytes_per_s: float | None
    error: int  # fio's job error (an errno); 0 when the job ran
    messages: list[str] = field(default_factory=list)  # fio's "fio: ..." lines

    @property
    def ok(self) -> bool:
        return self.error == 0 and self.bw_bytes_per_s is not None and self.bw_bytes_per_s > 0

    def why(self) -> str:
        text = "; ".join(self.messages[-2:]) if self.messages else f"fio job error {self.error}"
        return text if self.error == 0 else f"{text} (errno {self.error})"


@dataclass
class FioResult:
    bw_bytes_per_s: float | None
    method: str | None = None  # how the figure was measured
    reason: str | None = None  # why there is no figure
    notes: list[str] = field(default_factory=list)  # fallbacks taken on the way


def fio_binary() -> str | None:
    return shutil.which("fio")


def parse_fio_output(stdout: str, stderr: str = "") -> FioRun:
    """Parse ``--output-format=json``; fio may print "fio: ..." lines before the JSON."""
    messages = [ln.strip() for ln in (stdout + "\n" + stderr).splitlines() if ln.strip().startswith("fio:")]
    start = stdout.find("{")
    try:
        doc = json.loads(stdout[start:]) if start >= 0 else None
    except json.JSONDecodeError:
        doc = None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list) or not jobs or not isinstance(jobs[0], dict):
        return FioRun(None, -1, messages or ["fio printed no JSON result"])
    job = jobs[0]
    read = job.get("read") if isinstance(job.get("read"), dict) else {}
    bw = read.get("bw_bytes") if isinstance(read, dict) else None
    error = job.get("error", 0)
    return FioRun(
        float(bw) if isinstance(bw, int | float) else None,
        int(error) if isinstance(error, int) else -1,
        messages,
    )


def _escape(path: Path) -> str:
    # fio splits --filename on ':' (several files per job); escape it to mean one file.
    return str(path).replace(":", "\\:")


def _file_size(seconds: float, free_bytes: int | None) -> int | None:
    size = int(min(_MAX_FILE, max(_MIN_FILE, seconds * 64 * MIB)))
    if free_bytes is not None:
        size = min(size, free_bytes // 10)
    return size - size % MIB if size >= _MIN_FILE else None


def _run(argv: list[str], timeout: float) -> tuple[str, str] | None:
    """Run fio in its own process group; ``None`` when it ran past ``timeout`` and was killed."""
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=max(timeout, 0.01))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    return out, err


def _direct_refused(run: FioRun) -> bool:
    # fio's words (filesetup.c): "looks like your file system does not support direct=1/buffered=0"
    # and "destination does not support O_DIRECT", with the job error EINVAL.
    text = " ".join(run.messages).lower()
    return run.error == _EINVAL or "does not support direct=1" in text or "does not support o_direct" in text


def measure_read_bw(
    directory: Path, seconds: float, free_bytes: int | None = None, fio: str | None = None
) -> FioResult:
    """Sequential 1 MiB read bandwidth of the disk holding ``directory`` (bytes/s)."""
    deadline = time.monotonic() + seconds
    binary = fio or fio_binary()
    if binary is None:
        return FioResult(None, reason=f"fio is not installed ({INSTALL_HINT})")
    size = _file_size(seconds, free_bytes)
    if size is None:
        return FioResult(None, reason="too little free space for a fio test file")
    path = directory / f".kvstack-fio-{os.getpid()}-{time.monotonic_ns()}.tmp"
    common = [binary, "--thread", "--output-format=json", f"--filename={_escape(path)}", f"--size={size}"]
    try:
        # Lay the file out first, so that the read run gets whatever time is left.
        layout_argv = [*common, "--name=kvstack-layout", "--rw=read", "--bs=1M", "--create_only=1"]
        laid = _run(layout_argv, 0.6 * seconds)
        if laid is None:
            mib = size // MIB
            return FioResult(None, reason=f"writing a {mib} MiB test file took over {0.6 * seconds:.1f} s")
        layout = parse_fio_output(*laid)
        if layout.error != 0:
            return FioResult(None, reason=f"fio could not create its test file: {layout.why()}")
        return _read_runs(common, deadline)
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def _read_runs(common: list[str], deadline: float) -> FioResult:
    notes: list[str] = []
    last = "fio did not run"
    direct = True
    engines = list(ENGINES)
    while engines:
        engine = engines[0]
        left = deadline - time.monotonic()
        # fio needs time to start and stop around its timed run: 0.3-0.4 s measured here with two
        # cores busy, more on a loaded machine, where the old quarter of what was left (0.6 s of a
        # 3 s bound) once ran out in CI. Half of it reads: a second of 1 MiB reads gives the figure.
        runtime = 0.5 * left
        if runtime < 0.2:
            return FioResult(None, reason=f"no time left for fio ({last})", notes=notes)
        depth = 1 if engine == "psync" else 32
        argv = [
            *common,
            "--name=kvstack-seqread",
            "--rw=read",
            "--bs=1M",
            f"--direct={int(direct)}",
            f"--ioengine={engine}",
            f"--iodepth={depth}",
            "--time_based",
            f"--runtime={int(runtime * 1000)}ms",
        ]
        out = _run(argv, left)
        if out is None:
            return FioResult(None, reason=f"fio ({engine}) did not finish within the time bound", notes=notes)
        run = parse_fio_output(*out)
        if run.ok:
            mode = "O_DIRECT" if direct else "buffered, may include page cache"
            method = f"fio {engine} {mode}, 1 MiB sequential reads, QD{depth}"
            return FioResult(run.bw_bytes_per_s, method=method, notes=notes)
        last = f"{engine}: {run.why()}"
        if direct and _direct_refused(run):
            direct = False
            notes.append(f"O_DIRECT refused ({run.why()}): measured with buffered reads")
            continue
        if run.error in _FILE_ERRORS:
            return FioResult(None, reason=f"fio failed: {last}", notes=notes)
        notes.append(f"{engine} failed ({run.why()})")
        engines.pop(0)
    return FioResult(None, reason=f"fio failed with every engine; last: {last}", notes=notes)
