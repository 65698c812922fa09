"""Assert that a fault changed no file outside the places a run may write.

The fault tests run kvstack with HOME (and every XDG base directory) in a temporary directory, then
snapshot (path, size, mtime) of that HOME, of the repository's tree (tracked files and untracked
ones git does not ignore), before and after each fault.
A change is allowed only under the run's cache dir, its run dir, or one of the engines' own caches
listed in ``ENGINE_CACHES`` (each with its reason); anything else fails the test.

Not snapshotted: /tmp (shared by every test on this machine; kvstack's own temporary files are
written next to their target and renamed) and /proc, /sys, /dev.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from kvstack.engines.vllm_kv_spec import CACHE_ENV, spec_cache_dir
from tests.support.deps import ROOT

# Relative to the temporary HOME: what the engines write there on their own (each seen in a run of
# the fault tests with a fresh HOME; nothing else appeared, torch's and Triton's caches included).
ENGINE_CACHES = {
    # vLLM's VLLM_CACHE_ROOT (default ~/.cache/vllm): its torch.compile artifacts and hashes.
    ".cache/vllm": "vLLM's cache root (VLLM_CACHE_ROOT)",
    # LMCache writes its usage-tracking machine_id there (~/.config/lmcache/machine_id) at start.
    ".config/lmcache": "LMCache's config directory",
}

Snapshot = dict[str, tuple[int, int]]  # path -> (size, mtime_ns)

# This user's vLLM cache root, read before any test moves HOME: vLLM's torch.compile artifacts there
# are what a user's engine finds on its second start. A fresh one costs each engine start ~11 s of
# compiling here (a warm-up of 18 s against 7 s).
USER_VLLM_CACHE = os.environ.get("VLLM_CACHE_ROOT") or os.path.expanduser("~/.cache/vllm")
# The same for the answers of the engine spec probe (kvstack/engines/vllm_kv_spec.py): a fresh cache
# costs each plan of a model the probe (~10-30 s here).
USER_SPEC_CACHE = str(spec_cache_dir())


def isolated_home(base: Path) -> dict[str, str]:
    """Environment entries that put HOME and the XDG base directories under ``base``; vLLM's
    compile cache and kvstack's engine spec answers stay the user's (USER_VLLM_CACHE,
    USER_SPEC_CACHE)."""
    home = base / "home"
    home.mkdir(parents=True, exist_ok=True)
    return {
        "VLLM_CACHE_ROOT": USER_VLLM_CACHE,
        CACHE_ENV: USER_SPEC_CACHE,
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
    }


def isolated_cli_env(base: Path, engine_python: str) -> dict[str, str]:
    """This process's environment for a kvstack subprocess: no KVSTACK_* setting of the caller's,
    HOME and the XDG dirs under ``base`` (isolated_home), wide output, and the engine's Python."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVSTACK_")}
    env.update(isolated_home(base), COLUMNS="200", KVSTACK_ENGINE_PYTHON=engine_python)
    return env


def _walk(root: Path, into: Snapshot) -> None:
    if not root.exists():
        return
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            into[path] = (st.st_size, st.st_mtime_ns)


def _repo_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout  # fmt: skip
    return [str(ROOT / p) for p in listed.decode().split("\0") if p]


@dataclass
class FileGuard:
    home: Path  # the temporary HOME kvstack runs with
    allowed: list[Path]  # the run's cache dir and run dir
    # Other roots to watch. Not the real HOME's kvstack directories: every other kvstack on this
    # machine (other tests, other users' serves) writes its control index and runs there, and the
    # kvstack under test has HOME in ``home``, so anything it wrote there would show under ``home``.
    extra_roots: list[Path] = field(default_factory=list)

    def snapshot(self) -> Snapshot:
        snap: Snapshot = {}
        for root in (self.home, *self.extra_roots):
            _walk(root, snap)
        for path in _repo_files():
            try:
                st = os.lstat(path)
            except OSError:
                continue
            snap[path] = (st.st_size, st.st_mtime_ns)
        return snap

    def _allowed(self, path: str) -> bool:
        p = Path(path)
        places = [*self.allowed, *(self.home / rel for rel in ENGINE_CACHES)]
        return any(p.is_relative_to(place) for place in places)

    def changed_since(self, before: Snapshot) -> list[str]:
        """Files created, removed or changed since ``before`` outside the allowed places."""
        after = self.snapshot()
        changed = [p for p in before.keys() | after.keys() if before.get(p) != after.get(p)]
        return sorted(p for p in changed if not self._allowed(p))
