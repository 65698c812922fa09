"""Disk -> device bandwidth: read a chunk-sized file set from a cache path into device memory.

What LMCache's local_disk backend does (lmcache/v1/storage_backend/local_disk_backend.py,
``read_file``): one file per KV chunk, ``open(path, "rb").readinto(buffer)`` into a host buffer,
or O_DIRECT when ``extra_config.use_odirect`` is set; the connector then copies the chunk to the
GPU. Each method below reads the whole file set once with the page cache kept out, so the figure
is the disk's and not DRAM's. The file set lives in a private directory that is always removed.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from kvstack.hardware.calibrate import buffers
from kvstack.hardware.calibrate.model import DiskFigures
from kvstack.hardware.calibrate.timing import Deadline

FREE_SHARE = 0.1  # never fill more than this share of a path's free space with the file set
GDS_HINT = "pip install kvikio-cu12 (or kvikio-cu13) for cuFile/GPUDirect Storage reads"

Reader = Callable[[Path], None]


@contextlib.contextmanager
def _workdir(path: Path) -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(prefix=".kvstack-calibrate-", dir=path))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _write_files(where: Path, files: int, file_bytes: int, deadline: Deadline) -> list[Path]:
    """Random (incompressible) files, synced so that their pages are clean and can be dropped."""
    block = bytearray(os.urandom(file_bytes))
    out: list[Path] = []
    for i in range(files):
        if out and deadline.passed():
            break
        block[:8] = i.to_bytes(8, "little")  # distinct contents: no dedup between files
        p = where / f"chunk-{i:05d}.bin"
        with open(p, "wb") as f:
            f.write(block)
            f.flush()
            os.fsync(f.fileno())
        out.append(p)
    return out


def drop_cache(files: list[Path]) -> str:
    """Evict the files' clean pages so that the next buffered read comes from the disk."""
    if not hasattr(os, "posix_fadvise"):
        return "page cache not dropped (no posix_fadvise on this platform)"
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return "posix_fadvise(DONTNEED) after fsync before each pass"


def _read_full(f: io.FileIO, view: memoryview) -> None:
    done = 0
    while done < len(view):
        n = f.readinto(view[done:])
        if not n:
            raise OSError(f"short read: {done} of {len(view)} bytes")
        done += n


def _buffered_reader(host: torch.Tensor, dev: torch.Tensor) -> Reader:
    view = buffers.writable_view(host)

    def read(p: Path) -> None:
        with open(p, "rb", buffering=0) as f:
            _read_full(f, view)
        dev.copy_(host)

    return read


def _direct_reader(host: torch.Tensor, dev: torch.Tensor) -> Reader:
    view = buffers.writable_view(host)

    def read(p: Path) -> None:
        fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
        with os.fdopen(fd, "rb", buffering=0) as f:
            _read_full(f, view)
        dev.copy_(host)

    return read


def _gds_reader(dev: torch.Tensor) -> tuple[Reader | None, str]:
    """A cuFile reader through kvikio, or why there is none."""
    if not buffers.is_cuda(dev.device):
        return None, "cuFile/GDS reads into GPU memory: not applicable on device cpu"
    try:
        kvikio = importlib.import_module("kvikio")
    except ImportError:
        return None, f"kvikio is not installed ({GDS_HINT})"

    def read(p: Path) -> None:
        # kvikio takes any object with __cuda_array_interface__, which CUDA tensors have.
        with kvikio.CuFile(str(p), "r") as f:
            f.read(dev)

    return read, "cuFile via kvikio"


def _kvikio_mode() -> str | None:
    """kvikio falls back to POSIX reads (compat mode) when the GDS driver is absent: say which."""
    with contextlib.suppress(Exception):
        defaults = importlib.import_module("kvikio.defaults")
        getter = getattr(defaults, "compat_mode", None)
        mode = getter() if callable(getter) else defaults.get("compat_mode")
        return f"kvikio compat mode: {mode}"
    return None


def _timed_pass(
    files: list[Path], read: Reader, sync: Callable[[], None], deadline: Deadline
) -> tuple[int, float]:
    """(files read, seconds); stops at the deadline, after at least one file."""
    start = time.perf_counter()
    done = 0
    for p in files:
        if done and deadline.passed():
            break
        read(p)
        done += 1
    sync()
    return done, time.perf_counter() - start


def measure_disk(
    path: Path, device: torch.device, file_bytes: int, files: int, deadline: Deadline
) -> DiskFigures:
    """Read bandwidth from ``path`` into ``device`` memory, per method; bounded in bytes and time."""
    file_bytes = max(buffers.PAGE, file_bytes - file_bytes % buffers.PAGE)
    figures = DiskFigures(path=str(path), files=0, file_bytes=file_bytes)
    free = shutil.disk_usage(path).free
    files = min(files, int(free * FREE_SHARE) // file_bytes)
    if files < 1:
        figures.unknown["path"] = f"less than {file_bytes / FREE_SHARE:.0f} bytes free: not measured"
        return figures
    sync = buffers.sync_fn(device)
    dev = torch.empty(file_bytes, dtype=torch.uint8, device=device)
    host = buffers.pageable(file_bytes)
    bounce, bounce_kind = buffers.bounce(file_bytes, device)
    with _workdir(path) as where:
        written = _write_files(where, files, file_bytes, deadline.share(0.4))
        figures.files = len(written)
        readers: dict[str, Reader] = {
            "plain_bytes_per_s": _buffered_reader(host, dev),
            "bounce_bytes_per_s": _buffered_reader(bounce, dev),
        }
        if not hasattr(os, "O_DIRECT"):
            figures.unknown["direct_bytes_per_s"] = "O_DIRECT is not available on this platform"
        elif not buffers.page_aligned(bounce):
            figures.unknown["direct_bytes_per_s"] = "the bounce buffer is not page-aligned: O_DIRECT needs it"
        else:
            readers["direct_bytes_per_s"] = _direct_reader(bounce, dev)
        gds, gds_why = _gds_reader(dev)
        if gds is None:
            figures.unknown["gds_bytes_per_s"] = gds_why
        else:
            readers["gds_bytes_per_s"] = gds
            figures.notes.append(_kvikio_mode() or gds_why)
        figures.notes.append(f"bounce buffer: {bounce_kind}; each read is followed by its copy (no overlap)")
        for i, (field, read) in enumerate(readers.items()):
            figures.cache_drop = drop_cache(written)
            try:
                done, seconds = _timed_pass(written, read, sync, deadline.share(1 / (len(readers) - i)))
            except (OSError, RuntimeError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                figures.unknown[field] = f"{type(exc).__name__}: {why}"
                continue
            setattr(figures, field, done * file_bytes / seconds)
            if done < len(written):
                figures.notes.append(f"{field}: {done} of {len(written)} files read within the time budget")
    return figures
