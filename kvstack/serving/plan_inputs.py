"""The options ``plan``, ``serve``, ``export`` and ``bench`` share, turned into a PlanRequest and a
hardware snapshot in one place: the choices checked, ``--retain``, ``--context`` and
``--min-disk-bw`` parsed, the cache dir resolved, the snapshot loaded or probed."""

from __future__ import annotations

from pathlib import Path
from typing import cast

from kvstack.hardware.checks import DISK_MIN_BW
from kvstack.hardware.snapshot import HardwareSnapshot, load_snapshot
from kvstack.names import ENGINES, OFFLOAD_CHOICES, choice
from kvstack.planning.request import PlanRequest
from kvstack.planning.retention import parse_retain
from kvstack.planning.schema import Engine, OffloadChoice
from kvstack.planning.tuned import TUNED_JSON, TunedLayout
from kvstack.units import parse_bytes, parse_tokens
from kvstack.userfile import read_model


def resolve_dir(path: Path) -> Path:
    """A directory given on the command line, as kvstack uses it: ``~`` expanded, symlinks followed."""
    return path.expanduser().resolve()


def plan_request(
    *,
    engine: str = "vllm",
    offload: str = "auto",
    context: str | None = None,
    users: int | None = None,
    tp: int | None = None,
    kv_dtype: str | None = None,
    remote: str | None = None,
    retain: str | None = None,
    no_disk: bool = False,
    cache_dir: Path | None = None,
    min_disk_bw: str | None = None,
    gpu_memory_utilization: float | None = None,
    tuned: Path | None = None,
) -> PlanRequest:
    """The PlanRequest these options ask for; bad input raises InputError naming the flag.
    ``tuned``: a `kvstack tune` --out DIR (or its tuned.json) whose layout the plan takes."""
    choice(engine, ENGINES, "--engine")
    choice(offload, OFFLOAD_CHOICES, "--offload")
    retain_factor, retain_bytes = parse_retain(retain) if retain is not None else (None, None)
    return PlanRequest(
        retain_factor=retain_factor,
        retain_bytes=retain_bytes,
        disk_tier=not no_disk,
        engine=cast(Engine, engine),
        context=parse_tokens(context) if context is not None else None,
        users=users,
        tp=tp,
        kv_dtype=kv_dtype,
        remote_url=remote,
        offload=cast(OffloadChoice, offload),
        cache_root=str(resolve_dir(cache_dir)) if cache_dir is not None else None,
        min_disk_bw=float(parse_bytes(min_disk_bw, "--min-disk-bw")) if min_disk_bw else DISK_MIN_BW,
        gpu_memory_utilization=gpu_memory_utilization,
        tuned=read_tuned(tuned) if tuned is not None else None,
    )


def tuned_file(path: Path) -> Path:
    """--tuned's file: the tuned.json in a `kvstack tune` --out DIR, or the file given."""
    return path / TUNED_JSON if path.is_dir() else path


def read_tuned(path: Path) -> TunedLayout:
    """The layout a `kvstack tune` run chose: its --out DIR or the tuned.json in it."""
    file = tuned_file(path)
    return read_model(
        file, TunedLayout, "a kvstack tune result", "pass the --out DIR of kvstack tune", what="--tuned"
    )


def load_or_probe(hardware: Path | None, disk: Path | None, fio_seconds: float = 3.0) -> HardwareSnapshot:
    """``--hardware``'s snapshot, else this machine's, its disk bandwidth measured where ``disk`` is."""
    if hardware is not None:
        return load_snapshot(hardware)
    from kvstack.hardware.probe import probe  # probes run only when no snapshot is given

    return probe(paths=[resolve_dir(disk)] if disk is not None else None, fio_seconds=fio_seconds)
