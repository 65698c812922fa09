"""The plan's inputs (``PlanInputs``: the flags ``plan``, ``serve``, ``export``, ``bench`` and ``tune``
share, declared once), turned into a PlanRequest and a hardware snapshot in one place: the choices
checked, ``--retain``, ``--context`` and ``--min-disk-bw`` parsed, the cache dir resolved, the
snapshot loaded or probed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Self

from pydantic import model_validator

from kvstack.errors import InputError
from kvstack.flags import (
    DEFAULT_SLO_SHARE,
    Inputs,
    Json,
    OutputTokens,
    SloShare,
    SloTtft,
    check_slo_share,
    flag,
)
from kvstack.hardware.checks import DISK_MIN_BW
from kvstack.hardware.snapshot import HardwareSnapshot, load_snapshot
from kvstack.names import ENGINES, OFFLOAD_CHOICES
from kvstack.planning.predict.capacity_schema import CapacityAsk
from kvstack.planning.request import PlanRequest
from kvstack.planning.retention import parse_retain
from kvstack.planning.schema import Engine, OffloadChoice
from kvstack.planning.tuned import TUNED_JSON, TunedLayout
from kvstack.remoteurl import RemoteURL
from kvstack.units import parse_bytes, parse_tokens
from kvstack.userfile import read_model


def resolve_dir(path: Path) -> Path:
    """A directory given on the command line, as kvstack uses it: ``~`` expanded, symlinks followed."""
    return path.expanduser().resolve()


class PlanInputs(Inputs):
    """What the plan is asked for, as the command line gives it."""

    model: Annotated[
        str,
        flag(
            "--model",
            "-m",
            help="A local model directory, a Hugging Face id (org/name: the HF cache, else the hub) or a "
            "catalog name.",
        ),
    ]
    revision: Annotated[
        str | None,
        flag("--revision", help="Branch, tag or commit of a Hugging Face id (default: main)."),
    ] = None
    engine: Annotated[Engine, flag("--engine", help="vllm or sglang.", choices=ENGINES)] = "vllm"
    offload: Annotated[
        OffloadChoice,
        flag(
            "--offload", help="auto, lmcache, lmcache-mp, native, hicache or none.", choices=OFFLOAD_CHOICES
        ),
    ] = "auto"
    hardware: Annotated[
        Path | None,
        flag(
            "--hardware", help="Hardware snapshot from `kvstack doctor --json` (default: probe this machine)."
        ),
    ] = None
    context: Annotated[
        str | None,
        flag(
            "--context",
            help="Tokens per session: 32768, 32k, 128K, 1m (default: the workload's, else the model's max).",
        ),
    ] = None
    users: Annotated[
        int | None,
        flag("--users", help="Concurrent sessions at that context (default: the workload's, else 1).", ge=1),
    ] = None
    tp: Annotated[
        int | None, flag("--tp", help="Tensor-parallel size (default: chosen from the GPUs).", ge=1)
    ] = None
    kv_dtype: Annotated[
        str | None, flag("--kv-dtype", help="KV cache dtype (default: chosen by GPU and engine).")
    ] = None
    workload: Annotated[
        str | None,
        flag(
            "--workload",
            help="Workload profile in profiles/workloads/ (e.g. rag-long-doc, agent-multi-turn).",
        ),
    ] = None
    cache_dir: Annotated[
        Path | None, flag("--cache-dir", help="Root of the disk tier (kept private, 0700).")
    ] = None
    retain: Annotated[
        str | None,
        flag(
            "--retain",
            help="KV to keep cached for returning users: a multiple of the working set (10, the default) "
            "or a size (2TB).",
        ),
    ] = None
    no_disk: Annotated[bool, flag("--no-disk", help="Plan no disk tier, whatever the retention target.")] = (
        False
    )
    min_disk_bw: Annotated[
        str | None,
        flag(
            "--min-disk-bw",
            help="Slowest disk read bandwidth (per second) worth a KV tier, e.g. 2GB (default 1GB).",
        ),
    ] = None
    tuned: Annotated[
        Path | None,
        flag(
            "--tuned",
            help="Take the connector, chunk and tier sizes a kvstack tune run chose "
            "(its --out DIR or tuned.json).",
        ),
    ] = None
    gpu_memory_utilization: Annotated[
        float | None,
        flag(
            "--gpu-memory-utilization",
            help="Fraction of GPU memory for weights + KV (default 0.92).",
        ),
    ] = None

    def plan_request(self, remote: RemoteURL | None, cache_dir: Path | None = None) -> PlanRequest:
        """The PlanRequest these inputs ask for, with the remote store's URL (parsed where it entered;
        the request holds its redacted form only) and the disk tier's root (default: --cache-dir as
        given)."""
        cache_dir = cache_dir if cache_dir is not None else self.cache_dir
        retain_factor, retain_bytes = parse_retain(self.retain) if self.retain is not None else (None, None)
        min_disk_bw = self.min_disk_bw
        return PlanRequest(
            retain_factor=retain_factor,
            retain_bytes=retain_bytes,
            disk_tier=not self.no_disk,
            engine=self.engine,
            context=parse_tokens(self.context) if self.context is not None else None,
            users=self.users,
            tp=self.tp,
            kv_dtype=self.kv_dtype,
            remote_url=remote.redacted() if remote is not None else None,
            offload=self.offload,
            cache_root=str(resolve_dir(cache_dir)) if cache_dir is not None else None,
            min_disk_bw=float(parse_bytes(min_disk_bw, "--min-disk-bw")) if min_disk_bw else DISK_MIN_BW,
            gpu_memory_utilization=self.gpu_memory_utilization,
            tuned=read_tuned(self.tuned) if self.tuned is not None else None,
        )

    def snapshot(self, fio_seconds: float = 3.0) -> HardwareSnapshot:
        """--hardware's snapshot, else this machine probed (its disk where --cache-dir is)."""
        return load_or_probe(self.hardware, self.cache_dir, fio_seconds)


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


class PlanOutputInputs(Inputs):
    """``kvstack plan``'s own flags: the trace's capacity curve as a PNG, the plan as JSON, and the
    SLO each layout's capacity is predicted under (planning/predict/plan_capacity.py)."""

    curve_png: Annotated[
        Path | None,
        flag("--curve-png", help="Write the trace's capacity curve, tier boundaries marked, as a PNG."),
    ] = None
    as_json: Json
    # plan --slo-ttft: the SLO each layout's capacity is predicted under (cli/plan.py words them).
    slo_ttft: SloTtft
    slo_share: SloShare
    output_tokens: OutputTokens = 128

    @model_validator(mode="after")
    def _check_slo(self) -> Self:
        check_slo_share(self.slo_share)
        if self.slo_ttft is None and self.slo_share is not None:
            raise InputError("--slo-share is read with --slo-ttft only", hint="add --slo-ttft MS")
        if self.output_tokens < 0:
            raise InputError(f"--output-tokens must be 0 or more, not {self.output_tokens}", hint="e.g. 128")
        return self

    def capacity_ask(self) -> CapacityAsk | None:
        """What each layout's capacity is predicted under; None without --slo-ttft."""
        if self.slo_ttft is None:
            return None
        share = DEFAULT_SLO_SHARE if self.slo_share is None else self.slo_share
        return CapacityAsk(slo_ttft_s=self.slo_ttft / 1000, share=share, output_tokens=self.output_tokens)
