"""PlanRequest: what the user asked `kvstack plan` (or `serve`) for, and its validation."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from kvstack.errors import InputError
from kvstack.hardware.checks import DISK_MIN_BW
from kvstack.planning.schema import Engine, OffloadChoice
from kvstack.planning.tuned import TunedLayout

# vLLM's --gpu-memory-utilization default (vllm/config/cache.py: 0.92). SGLang sizes
# --mem-fraction-static itself by GPU; kvstack passes 0.88, which leaves room for CUDA graphs.
DEFAULT_UTILIZATION: dict[str, float] = {"vllm": 0.92, "sglang": 0.88}


class PlanRequest(BaseModel):
    """What the user asked for. ``None`` means: decide (from the workload, the model or the hardware)."""

    model_config = ConfigDict(extra="forbid")

    engine: Engine = "vllm"
    context: int | None = None
    users: int | None = None  # None: the workload's users (1 without a workload)
    tp: int | None = None
    kv_dtype: str | None = None
    dtype: str | None = None  # the engine's --dtype among its arguments (after --); None: kvstack's choice
    remote_url: str | None = None
    offload: OffloadChoice = "auto"
    cache_root: str | None = None  # where a disk tier goes; None: the best disk in the snapshot
    min_disk_bw: float = DISK_MIN_BW  # doctor judges disks by the same bar
    gpu_memory_utilization: float | None = None
    # The retention target (planning/retention.py): a multiple of the working set or a size; None
    # for both: the workload's, else the default multiple.
    retain_factor: float | None = None
    retain_bytes: int | None = None
    disk_tier: bool = True  # False: --no-disk
    engine_versions: dict[str, str] = Field(default_factory=dict)  # overrides snapshot.software
    tuned: TunedLayout | None = None  # --tuned: the connector, chunk and sizes kvstack tune chose

    def with_offload(self, offload: OffloadChoice) -> PlanRequest:
        """A shallow copy (unvalidated, as ``model_copy``) asking for ``offload``."""
        out = self.model_copy()
        out.offload = offload
        return out


def validate_request(request: PlanRequest) -> None:
    """Out-of-range numbers are bad input (exit 2), not a pydantic traceback."""
    for name, value in (("--context", request.context), ("--users", request.users), ("--tp", request.tp)):
        if value is not None and value < 1:
            raise InputError(f"{name} must be at least 1, not {value}", hint=f"e.g. {name} 1")
    util = request.gpu_memory_utilization
    if util is not None and not 0.05 <= util <= 1.0:
        raise InputError(f"--gpu-memory-utilization must be in (0.05, 1], not {util}", hint="e.g. 0.9")
    if request.retain_factor is not None and request.retain_factor < 1:
        raise InputError(
            f"--retain {request.retain_factor:g}x keeps less than the working set",
            hint="use a multiple of at least 1 (e.g. --retain 10) or a size (e.g. --retain 2TB)",
        )
    if request.retain_bytes is not None and request.retain_bytes <= 0:
        raise InputError("--retain must be a positive size", hint="e.g. --retain 2TB")
    if request.min_disk_bw < 0:
        raise InputError(f"--min-disk-bw must not be negative, not {request.min_disk_bw}")
