"""Wrong KV put into a real disk tier while a real validation pass runs: the adversary of the e2e tests.

The validation pass is kvstack's own, unmodified; this module only acts on the files of LMCache's
`fs_native` L2 adapter at the moment a tier:disk round has stored its prompt and dropped every copy
above the disk (the pass calls ``between`` before each request it sends: the round's first call
precedes the prompt's first request, its second the request the disk tier must serve). The adapter
keeps one raw file per chunk (no header, no checksum: lmcache 0.5.6 fs adapters), named by the
chunk's hash, so a file holding other bytes is served as that chunk.

Also, for the canary (tests/e2e/test_canary.py), wrong KV put into a tier while the engine serves:
``flip_l1_pool`` flips the sign bits of LMCache's L1 (DRAM) pool in place (a POSIX shared-memory
file, /dev/shm/lmcache_l1_pool_kvstack-<pid>), ``BadDisk`` every chunk file on disk,
those written later included.

Cases:
- ``swap``: every chunk file of this round's prompt holds the bytes of the previous round's prompt
  (same length, same number of chunks), in store order: the prompt is served another prompt's KV.
- ``flip``: one chunk file of the prompt (the middle one in store order) has the sign bit of every
  bf16 value flipped: finite, wrong KV for that chunk.
- ``flip-all``: every chunk file written since the round's first request, flipped so: with requests
  in flight (validate --concurrency) the load's prompts write chunk files too, and which of the new
  files are the prompt's is not known; the load never reads its own again.
"""

from __future__ import annotations

import glob
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kvstack.validation.scoring import SCORE_SALT_PREFIX

SALTED = "@" + SCORE_SALT_PREFIX  # a scoring request's chunk (<hash>@<salt>.data): never a prompt's own


def chunk_files(directory: Path) -> dict[str, int]:
    """Unsalted chunk files under ``directory`` -> mtime (ns)."""
    out: dict[str, int] = {}
    for root, _dirs, names in os.walk(directory):
        for name in names:
            if name.endswith(".data") and SALTED not in name:
                path = os.path.join(root, name)
                try:
                    out[path] = os.stat(path).st_mtime_ns
                except OSError:
                    continue
    return out


def flip_signs(path: Path) -> None:
    """Flip the sign bit of every bf16 value in the chunk file ``path``, replaced whole as LMCache
    writes it (a reader never sees it half-written). Vectorised: a chunk of the real model is 5.9 MB,
    and a Python loop over its bytes took 0.15-0.5 s a file, so a sweep of 500 files took minutes
    while the tier went on writing unflipped ones (a CI run's disk canary read two of those)."""
    import numpy as np

    data = np.fromfile(path, dtype=np.uint8)
    data[1::2] ^= 0x80  # little-endian bf16: the sign bit is the high byte's top bit
    tmp = path.with_name(path.name + ".flipping")
    data.tofile(tmp)
    os.replace(tmp, path)


@dataclass
class DiskTamper:
    """Pass ``progress`` as on_progress and ``between`` as between to run_validation."""

    directory: Path
    case: str  # "swap" | "flip"
    chunks: int  # chunks a prompt stores (full chunks of the prompt)
    step: str = "tier:disk"
    round: int = 0
    calls: int = 0
    before: dict[str, int] = field(default_factory=dict)
    previous: list[str] = field(default_factory=list)  # the last round's prompt's files, store order
    done: list[str] = field(default_factory=list)  # what was done, for the test's message

    def progress(self, msg: str) -> None:
        if msg.startswith(f"{self.step}: round "):
            self.round += 1
            self.calls = 0

    def between(self) -> None:
        if not self.round:
            return
        self.calls += 1
        if self.calls == 1:
            self.before = chunk_files(self.directory)
        elif self.calls == 2:
            mine = self._stored()
            if self.round == 1:
                self.previous = mine
            elif not self.done:
                self._tamper(mine)

    def _stored(self) -> list[str]:
        """This round's prompt's chunk files, once all of them are on disk (stores are asynchronous)."""
        deadline = time.monotonic() + 10.0
        while True:
            now = chunk_files(self.directory)
            new = {p: t for p, t in now.items() if p not in self.before}
            if len(new) >= self.chunks or time.monotonic() > deadline:
                return sorted(new, key=lambda p: (new[p], p))
            time.sleep(0.1)

    def _tamper(self, mine: list[str]) -> None:
        if self.case == "swap":
            pairs = list(zip(mine, self.previous, strict=False))
            for a, b in pairs:
                Path(a).write_bytes(Path(b).read_bytes())
            self.done.append(
                f"round {self.round}: {len(pairs)} chunk files replaced by the previous prompt's"
            )
        elif self.case == "flip":
            target = Path(mine[len(mine) // 2])
            flip_signs(target)
            self.done.append(f"round {self.round}: sign bits flipped in {target.name} ({len(mine)} chunks)")
        elif self.case == "flip-all":
            for path in mine:
                flip_signs(Path(path))
            self.done.append(f"round {self.round}: sign bits flipped in all {len(mine)} chunk files written")
        else:
            raise ValueError(self.case)


# --- the DRAM tier: LMCache's L1 pool -------------------------------------------------------------

# kvstack passes --shm-name kvstack-<pid> (engines/lmcache_guard.py)
L1_POOL_GLOB = "/dev/shm/lmcache_l1_pool_*"


def data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """The byte ranges of a tmpfs file that hold pages (SEEK_DATA/SEEK_HOLE): flipping only these
    touches no page the pool never used."""
    out, offset = [], 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError:
            break
        end = os.lseek(fd, start, os.SEEK_HOLE)
        out.append((start, end))
        offset = end
    return out


def flip_l1_pool(server_pid: int) -> int:
    """Flip the sign bit of every bf16 value in the L1 (DRAM) pool of the cache server ``server_pid``,
    in place, while it serves: every chunk the DRAM tier holds becomes finite, wrong KV (a chunk
    stored after this is written correctly). Returns the bytes flipped."""
    import mmap

    import numpy as np

    (path,) = [p for p in glob.glob(L1_POOL_GLOB) if p.endswith(f"-{server_pid}")]
    flipped = 0
    with open(path, "r+b") as fh:
        size = os.fstat(fh.fileno()).st_size
        extents = data_extents(fh.fileno(), size)
        with mmap.mmap(fh.fileno(), size) as mm:
            for start, end in extents:
                count = (end - start) // 2
                values = np.frombuffer(mm, dtype=np.uint16, count=count, offset=start)
                values ^= np.uint16(0x8000)
                flipped += 2 * count
                del values  # the mmap cannot close while a view holds it
    return flipped


class BadDisk:
    """A disk tier that holds wrong KV from now on: every chunk file there is flipped, and so is every
    file written later (the stores are asynchronous: a chunk planted just before may land after the
    first pass), checked every ``every_s`` on a thread until the block ends. Entering sweeps until a
    sweep finds nothing new, so the tamper is whole when the block starts. LMCache's fs adapters write
    each chunk to a ``.tmp`` file and rename it (lmcache_fs), so a ``.data`` file is always complete.

    ``flipped``: the files flipped so far."""

    ENTER_SWEEPS = 20

    def __init__(self, directory: Path, every_s: float = 0.2) -> None:
        self.directory = directory
        self.every_s = every_s
        self.done: dict[str, int] = {}  # path -> its mtime after the flip
        self.flipped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bad-disk", daemon=True)

    def __enter__(self) -> BadDisk:
        for _ in range(self.ENTER_SWEEPS):
            if not self.sweep():
                break
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def sweep(self) -> int:
        """Flip every chunk file not flipped since it was last written; the number flipped."""
        count = 0
        for path, mtime in chunk_files(self.directory).items():
            if self.done.get(path) == mtime:
                continue
            try:
                flip_signs(Path(path))
                self.done[path] = os.stat(path).st_mtime_ns
            except OSError:
                continue  # evicted meanwhile
            count += 1
        self.flipped += count
        return count

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sweep()
