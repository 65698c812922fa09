"""Peak dense BF16 throughput, HBM bandwidth and host link per GPU model (vendor data sheets).

Figures are the data-sheet peaks without sparsity; the planner applies its own efficiency factor.
A GPU not in the table falls back to a typical part of its compute capability.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvstack.hardware.snapshot import GpuInfo

# PCIe payload bandwidth per lane and direction (GB/s) by generation; DMA from pinned host memory
# reaches ~80% of it (the planner's assumption, said in the plan's reasons).
_PCIE_LANE_BYTES = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}
PCIE_EFFICIENCY = 0.8


@dataclass(frozen=True)
class GpuSpec:
    model: str
    bf16_flops: float  # peak dense BF16 tensor FLOP/s
    hbm_bytes_per_s: float
    host_link_bytes_per_s: float | None = None  # NVLink-C2C parts; None: PCIe from the snapshot
    source: str = "data sheet"


_C2C = 450e9  # NVLink-C2C, per direction (GH200 / GB200 data sheets: 900 GB/s bidirectional)

# (substrings that must all appear in the lower-cased NVML name) -> spec. First match wins.
_TABLE: tuple[tuple[tuple[str, ...], GpuSpec], ...] = (
    (("gh200",), GpuSpec("GH200", 989e12, 4.0e12, _C2C)),
    (("gb200",), GpuSpec("GB200", 2500e12, 8.0e12, _C2C)),
    (("gb300",), GpuSpec("GB300", 2500e12, 8.0e12, _C2C)),
    (("h100", "pcie"), GpuSpec("H100 PCIe", 756e12, 2.0e12)),
    (("h100", "nvl"), GpuSpec("H100 NVL", 835e12, 3.9e12)),
    (("h100",), GpuSpec("H100 SXM", 989e12, 3.35e12)),
    (("h800",), GpuSpec("H800 SXM", 989e12, 3.35e12)),
    (("h200", "nvl"), GpuSpec("H200 NVL", 835e12, 4.8e12)),
    (("h200",), GpuSpec("H200", 989e12, 4.8e12)),
    (("h20",), GpuSpec("H20", 148e12, 4.0e12)),
    (("b300",), GpuSpec("B300", 2250e12, 8.0e12)),
    (("b200",), GpuSpec("B200", 2250e12, 8.0e12)),
    (("a100", "40gb"), GpuSpec("A100 40GB", 312e12, 1.555e12)),
    (("a100", "pcie"), GpuSpec("A100 80GB PCIe", 312e12, 1.935e12)),
    (("a100",), GpuSpec("A100 80GB SXM", 312e12, 2.039e12)),
    (("a800",), GpuSpec("A800", 312e12, 2.039e12)),
    (("l40s",), GpuSpec("L40S", 362e12, 0.864e12)),
    (("l40",), GpuSpec("L40", 181e12, 0.864e12)),
    (("l4",), GpuSpec("L4", 121e12, 0.3e12)),
    (("a10",), GpuSpec("A10", 125e12, 0.6e12)),
    (
        ("rtx pro 6000",),
        GpuSpec("RTX PRO 6000 Blackwell", 504e12, 1.792e12, source="data sheet, approximate"),
    ),
    (("rtx 6000 ada",), GpuSpec("RTX 6000 Ada", 364e12, 0.96e12)),
    (("5090",), GpuSpec("RTX 5090", 209e12, 1.792e12, source="data sheet, approximate")),
    (("4090",), GpuSpec("RTX 4090", 165e12, 1.008e12, source="data sheet, approximate")),
)

# A typical part per compute capability (major, minor); (major, -1) matches any minor.
_BY_CC: dict[tuple[int, int], GpuSpec] = {
    (7, -1): GpuSpec("Volta/Turing class", 65e12, 0.6e12),
    (8, 0): GpuSpec("A100 class", 312e12, 1.555e12),
    (8, -1): GpuSpec("Ampere workstation class", 70e12, 0.6e12),
    (8, 9): GpuSpec("Ada class (L40S)", 362e12, 0.864e12),
    (9, -1): GpuSpec("Hopper class (H100)", 756e12, 2.0e12),
    (10, -1): GpuSpec("Blackwell datacenter class (B200)", 2250e12, 8.0e12),
    (12, -1): GpuSpec("Blackwell workstation class", 400e12, 1.5e12),
}
_UNKNOWN = GpuSpec("unknown GPU", 50e12, 0.5e12)


def gpu_spec(name: str | None, cc: tuple[int, int] | None) -> GpuSpec:
    lowered = (name or "").lower()
    for needles, spec in _TABLE:
        if lowered and all(n in lowered for n in needles):
            return spec
    if cc is not None:
        typical = _BY_CC.get(cc) or _BY_CC.get((cc[0], -1))
        if typical is not None:
            source = f"fallback for CC {cc[0]}.{cc[1]}"
            return GpuSpec(typical.model, typical.bf16_flops, typical.hbm_bytes_per_s, None, source)
    return _UNKNOWN


def host_link_bytes_per_s(gpu: GpuInfo) -> tuple[float, str]:
    """Host -> device bandwidth of one GPU, and how it was derived."""
    spec = gpu_spec(gpu.name, gpu.compute_capability)
    if spec.host_link_bytes_per_s is not None:
        return spec.host_link_bytes_per_s * PCIE_EFFICIENCY, f"NVLink-C2C ({spec.model}) x {PCIE_EFFICIENCY}"
    gen, width = gpu.pcie_gen_max or gpu.pcie_gen_current, gpu.pcie_width_max or gpu.pcie_width_current
    assumed = ""
    if gen not in _PCIE_LANE_BYTES or not width:
        gen, width, assumed = 4, 16, " (link unknown: assumed)"
    bw = _PCIE_LANE_BYTES[gen] * width * PCIE_EFFICIENCY
    return bw, f"PCIe Gen{gen} x{width}{assumed} x {PCIE_EFFICIENCY}"


# Reduced-precision KV by compute capability (vLLM's and SGLang's attention backends): FP8 has
# tensor-core paths on Ada (8.9), Hopper (9.x) and Blackwell (10.x, 12.x), and runs through slower
# backends from Ampere (8.0); NVFP4 KV is CC 10.x only in vLLM (FlashInfer trtllm-gen), CC 10.x
# and 12.0 in SGLang.
FP8_NATIVE_CC = (8, 9)
FP8_MIN_CC = (8, 0)


def fp8_native(cc: tuple[int, int] | None) -> bool:
    return cc is not None and cc >= FP8_NATIVE_CC


def nvfp4_native(engine: str, cc: tuple[int, int] | None) -> bool:
    if cc is None:
        return False
    return cc[0] == 10 if engine == "vllm" else (cc[0] == 10 or cc == (12, 0))
