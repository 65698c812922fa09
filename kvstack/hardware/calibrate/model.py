"""The calibration record: figures measured on this machine by ``kvstack doctor --calibrate``.

Stored in ``HardwareSnapshot.calibration`` as plain JSON (``store_calibration``) and read back,
typed, with ``calibration_of``. Bandwidths are bytes/s, rates per second, ``None`` means not
measured and the section's ``unknown`` says why. This module never imports torch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvstack.errors import SnapshotError
from kvstack.hardware.snapshot import HardwareSnapshot


class _Model(BaseModel):
    # A newer kvstack may add figures; an older one still reads the rest.
    model_config = ConfigDict(extra="allow")


class CopyFigures(_Model):
    """Host <-> device copies of one KV-chunk-sized buffer (on device cpu: host <-> host memcpy)."""

    transfer_bytes: int
    runs: int
    method: str
    h2d_pinned_bytes_per_s: float | None = None
    h2d_pageable_bytes_per_s: float | None = None
    d2h_pinned_bytes_per_s: float | None = None
    d2h_pageable_bytes_per_s: float | None = None
    unknown: dict[str, str] = Field(default_factory=dict)


class DiskFigures(_Model):
    """Reading a file set from one cache path into device memory, page cache kept out."""

    path: str
    files: int
    file_bytes: int
    # Buffered reads into pageable memory, then a copy to the device.
    plain_bytes_per_s: float | None = None
    # Buffered reads into a pinned bounce buffer, then a copy (LMCache's default local_disk read).
    bounce_bytes_per_s: float | None = None
    # O_DIRECT reads into the pinned bounce buffer, then a copy (LMCache extra_config use_odirect).
    direct_bytes_per_s: float | None = None
    gds_bytes_per_s: float | None = None  # cuFile (kvikio) straight into device memory
    cache_drop: str = ""  # how the page cache was kept out of the buffered reads
    notes: list[str] = Field(default_factory=list)
    unknown: dict[str, str] = Field(default_factory=dict)


class PrefillPoint(_Model):
    prompt_tokens: int
    seconds: float
    tokens_per_s: float
    achieved_tflops: float  # FLOPs counted as the planner counts them (planning/predict/breakeven.py)
    peak_fraction: float | None = None  # of the GPU's data-sheet dense BF16 peak


class PrefillShape(_Model):
    """The dense Llama-shaped model prefill is measured on (hardware/calibrate/prefill.py builds it)."""

    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int


class PrefillFigures(PrefillShape):
    """One forward pass (batch 1) of a randomly initialised model of a catalog model's shape."""

    model: str  # catalog name of the shape
    # Every name the model goes by (catalog name, repo id, aliases), recorded when measured so that
    # the planner, which reads no files, can tell the same model under another name.
    names: list[str] = Field(default_factory=list)
    dtype: str
    scaled_down: bool  # True: a smaller model of the same kind (tests on device cpu)
    active_params: int  # of the model as built: what prefill rates scale by for other models
    points: list[PrefillPoint] = Field(default_factory=list)
    peak_tflops: float | None = None
    peak_source: str | None = None
    unknown: dict[str, str] = Field(default_factory=dict)


class SanityFigures(_Model):
    memory_bw_bytes_per_s: float | None = None  # device copy, bytes read + written per second
    copy_bytes: int
    matmul_tflops: float | None = None
    matmul_dtype: str
    matmul_size: int  # n of an n x n x n product
    notes: list[str] = Field(default_factory=list)
    unknown: dict[str, str] = Field(default_factory=dict)


class Calibration(_Model):
    source: Literal["measured"] = "measured"
    device: str  # "cuda:0" or "cpu"
    device_name: str
    torch_version: str
    cuda_version: str | None = None
    started_at: str
    finished_at: str
    budget_s: float
    elapsed_s: float
    # Median effective prefill FLOP/s of one GPU (full-size model on CUDA only): the figure that
    # planning/layout.py already reads from the snapshot's calibration to replace peak x fraction.
    effective_tflops: float | None = None
    host_copy: CopyFigures | None = None
    disks: list[DiskFigures] = Field(default_factory=list)
    prefill: PrefillFigures | None = None
    sanity: SanityFigures | None = None
    unknown: dict[str, str] = Field(default_factory=dict)  # section -> why it has no figures
    notes: list[str] = Field(default_factory=list)


def store_calibration(snapshot: HardwareSnapshot, calibration: Calibration) -> None:
    snapshot.calibration = calibration.model_dump(mode="json")


def calibration_of(snapshot: HardwareSnapshot) -> Calibration | None:
    """The snapshot's calibration, typed; None when it has none. A malformed one names the field."""
    if snapshot.calibration is None:
        return None
    try:
        return Calibration.model_validate(snapshot.calibration)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in ("calibration", *first["loc"]))
        raise SnapshotError(
            f"hardware snapshot: field '{where}' {first['msg'].lower()}",
            hint="measure again with: kvstack doctor --json --calibrate > hw.json",
        ) from exc
