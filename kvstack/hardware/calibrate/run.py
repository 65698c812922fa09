"""`kvstack doctor --calibrate`: measure what the planner otherwise takes from data sheets.

torch is imported here, lazily, and only on this path: ``kvstack doctor`` without --calibrate
never imports it. A CUDA GPU is required; ``KVSTACK_CALIBRATE_DEVICE=cpu`` runs the same
measurement code on the CPU with tiny sizes, which is how the tests exercise it.
Each section fails soft: a device error leaves that section empty with the reason in ``unknown``.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from kvstack.errors import InputError, MissingProgramError, UnsupportedError
from kvstack.hardware.calibrate.model import Calibration, DiskFigures
from kvstack.hardware.calibrate.timing import Deadline
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.catalog import catalog_model

if TYPE_CHECKING:
    import torch

ENV_DEVICE = "KVSTACK_CALIBRATE_DEVICE"
MODEL = "meta-llama/Llama-3.1-8B"
CHUNK_TOKENS = 256  # LMCache's default chunk_size: one offload transfer
GET_TORCH = "https://pytorch.org/get-started/locally/"
TORCH_HINT = f"pip install torch (a CUDA build, on the GPU machine: {GET_TORCH})"
MiB = 1024 * 1024

T = TypeVar("T")


@dataclass(frozen=True)
class Sizes:
    transfer_bytes: int | None  # host copies and disk files; None: one KV chunk of MODEL
    disk_files: int
    prompt_lengths: tuple[int, ...]
    scale_model: bool  # build a two-layer model of MODEL's kind instead of the full one
    dtype: str
    copy_bytes: int  # device-to-device copy for the memory bandwidth figure
    matmul_size: int
    max_runs: int


GPU_SIZES = Sizes(None, 32, (1024, 2048, 4096, 8192, 16384, 32768), False, "bfloat16", 2048 * MiB, 8192, 10)
# Figures of the code path, not of a CPU server: small enough to run in a second on one core.
CPU_SIZES = Sizes(MiB, 4, (32, 64), True, "float32", 8 * MiB, 128, 3)

# Shares of the time left when each section starts; prefill takes whatever remains.
SANITY_SHARE, COPY_SHARE, DISK_SHARE = 0.1, 0.1, 0.4


def import_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise MissingProgramError("calibration needs torch, which is not installed", hint=TORCH_HINT) from exc


def resolve_device(device: str | None = None) -> str:
    """ "cpu" or "cuda:N": ``device``, else $KVSTACK_CALIBRATE_DEVICE, else the first GPU."""
    import_torch()
    import torch

    wanted = (device or os.environ.get(ENV_DEVICE, "").strip() or "cuda").lower()
    if wanted == "cpu":
        return "cpu"
    index_text = wanted.removeprefix("cuda").removeprefix(":") or "0"
    if not wanted.startswith("cuda") or not index_text.isdigit():
        raise InputError(
            f"calibration device must be cpu, cuda or cuda:N, not {wanted!r}",
            hint=f"unset {ENV_DEVICE} to use the first GPU",
        )
    if not torch.cuda.is_available():
        build = "is a CPU-only build" if torch.version.cuda is None else "sees no CUDA device"
        raise UnsupportedError(
            f"calibration needs an NVIDIA GPU with a CUDA build of torch (torch {torch.__version__} {build})",
            hint=f"run it where a GPU and a CUDA torch are ({GET_TORCH}); {ENV_DEVICE}=cpu is for tests",
        )
    index = int(index_text)
    if index >= torch.cuda.device_count():
        raise InputError(
            f"calibration device cuda:{index} does not exist ({torch.cuda.device_count()} GPU(s) visible)",
            hint="use cuda:0 .. cuda:N-1, or check CUDA_VISIBLE_DEVICES",
        )
    return f"cuda:{index}"


def cache_paths(snapshot: HardwareSnapshot) -> tuple[list[Path], list[str]]:
    """Existing directories of the snapshot's writable, non-tmpfs candidate paths; notes on the rest."""
    paths: list[Path] = []
    notes: list[str] = []
    for d in snapshot.disks:
        if d.tmpfs or not d.writable:
            notes.append(f"{d.path}: not read ({'tmpfs is memory' if d.tmpfs else 'not writable'})")
            continue
        where = Path(d.path)
        while not where.is_dir() and where != where.parent:
            where = where.parent  # a cache path that does not exist yet: its future file system
        if where not in paths:
            paths.append(where)
    return paths, notes


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _peak(dev: torch.device, dtype: torch.dtype) -> tuple[float, str] | None:
    import torch

    from kvstack.hardware.gpu_specs import gpu_spec

    if dev.type != "cuda" or dtype != torch.bfloat16:
        return None
    spec = gpu_spec(torch.cuda.get_device_name(dev), torch.cuda.get_device_capability(dev))
    return spec.bf16_flops, f"{spec.model} dense BF16 ({spec.source})"


def _guard(cal: Calibration, section: str, measure: Callable[[], T]) -> T | None:
    """Run one section; a device or file error becomes a reason, not a crash."""
    try:
        return measure()
    except (RuntimeError, OSError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        cal.unknown[section] = f"{type(exc).__name__}: {first}"
        return None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def calibrate(
    snapshot: HardwareSnapshot,
    device: str | None = None,
    budget_s: float = 120,
    *,
    sizes: Sizes | None = None,
    paths: Sequence[Path] | None = None,
) -> Calibration:
    """Measure copies, disk -> device reads (``paths``, default: the snapshot's cache candidates),
    prefill and the device's own speed, within about ``budget_s`` seconds."""
    if not math.isfinite(budget_s) or budget_s <= 0:
        raise InputError(
            f"the calibration budget must be a positive number of seconds, not {budget_s:g}",
            hint="e.g. --calibrate-seconds 120",
        )
    name = resolve_device(device)
    import torch

    from kvstack.hardware.calibrate import copy, disk, prefill, sanity

    dev = torch.device(name)
    sizes = sizes or (GPU_SIZES if dev.type == "cuda" else CPU_SIZES)
    dtype = getattr(torch, sizes.dtype)
    geo, _ = catalog_model(MODEL)
    start = time.monotonic()
    deadline = Deadline.after(budget_s)
    cal = Calibration(
        device=name,
        device_name=torch.cuda.get_device_name(dev) if dev.type == "cuda" else _cpu_name(),
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda,
        started_at=_now(),
        finished_at="",
        budget_s=budget_s,
        elapsed_s=0.0,
    )
    if dev.type != "cuda":
        cal.notes.append("device cpu: figures of the measurement code on this CPU, not of a GPU")
    runs = sizes.max_runs
    cal.sanity = _guard(
        cal,
        "sanity",
        lambda: sanity.measure_sanity(
            dev, sizes.copy_bytes, sizes.matmul_size, dtype, deadline.share(SANITY_SHARE), runs
        ),
    )
    chunk = sizes.transfer_bytes or CHUNK_TOKENS * geo.kv_bytes_per_token
    cal.host_copy = _guard(
        cal, "host_copy", lambda: copy.measure_copy(dev, chunk, deadline.share(COPY_SHARE), runs)
    )
    if paths is None:
        found, notes = cache_paths(snapshot)
        cal.notes.extend(notes)
    else:
        found = list(paths)
    if not found:
        cal.unknown["disks"] = "no writable, non-tmpfs cache path to read from"
    disk_deadline = deadline.share(DISK_SHARE)
    for i, p in enumerate(found):
        share = disk_deadline.share(1 / (len(found) - i))
        measure = functools.partial(disk.measure_disk, p, dev, chunk, sizes.disk_files, share)
        figures: DiskFigures | None = _guard(cal, f"disk {p}", measure)
        if figures is not None:
            cal.disks.append(figures)
    cal.prefill = _guard(
        cal,
        "prefill",
        lambda: prefill.measure_prefill(
            geo,
            dev,
            dtype,
            list(sizes.prompt_lengths),
            deadline,
            scale=sizes.scale_model,
            max_runs=min(runs, 3),
            peak=_peak(dev, dtype),
        ),
    )
    if cal.prefill is not None and dev.type == "cuda" and not cal.prefill.scaled_down:
        cal.effective_tflops = prefill.effective_tflops(cal.prefill)
    cal.finished_at = _now()
    cal.elapsed_s = time.monotonic() - start
    return cal
