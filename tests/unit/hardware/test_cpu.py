"""The CPU probe on recorded and built /proc trees (tests/fixtures/cpu/README.md says which is which),
and on this machine."""

from __future__ import annotations

import os

import pytest

from kvstack.hardware import checks, cpu
from kvstack.hardware.snapshot import CpuInfo, HardwareSnapshot

from .fixtures import FIXTURES

CPUS = FIXTURES / "cpu"


def tree(name: str) -> CpuInfo:
    return cpu.probe_cpu(CPUS / name, measure=False)


def test_the_recorded_host_has_avx512_with_bf16_and_no_quota() -> None:
    info = tree("epyc-avx512-bf16")
    assert info.model == "AMD EPYC" and info.vendor == "AuthenticAMD"
    assert info.logical_cpus == 2 and info.affinity_cpus == 2 and info.cpu_quota is None
    assert info.usable_cores == 2 and info.numa_nodes == 1
    assert info.features == ["avx2", "avx512f", "avx512_bf16"]
    assert info.bf16_native == "avx512_bf16" and info.fp16_native is None
    assert info.isa == "AVX-512 + AVX512-BF16" and info.vllm_kernels == "_C_AVX512"
    assert "cpu_quota" not in info.unknown


def test_an_avx2_host_under_a_cgroup_v2_quota_gets_the_quotas_cores() -> None:
    info = tree("epyc-avx2")
    assert info.model == "AMD EPYC 7B12"
    assert info.cpu_quota == 1.5  # the pod's cpu.max, tighter than its parent's "max"
    assert info.affinity_cpus == 2 and info.usable_cores == 1
    assert info.features == ["avx2"] and info.bf16_native is None and info.isa == "AVX2"


def test_avx512_without_bf16_and_an_affinity_mask() -> None:
    info = tree("xeon-avx512")
    assert info.logical_cpus == 8 and info.affinity_cpus == 4 and info.usable_cores == 4
    assert info.numa_nodes == 2
    assert "avx512f" in info.features and info.bf16_native is None
    assert info.isa == "AVX-512" and info.vllm_kernels == "_C_AVX2"  # AVX-512F alone is not enough
    assert "cpu_quota" not in info.unknown  # no cgroup mounted: no quota, not an error


def test_amx_computes_bf16_and_fp16() -> None:
    info = tree("xeon-amx")
    assert info.bf16_native == "avx512_bf16" and info.fp16_native == "avx512_fp16"
    assert {"amx_bf16", "amx_int8"} <= set(info.features)
    assert info.isa == "AVX-512 + AVX512-BF16 + AVX512-FP16 + AMX"
    assert info.cpu_quota is None and info.usable_cores == 4


@pytest.mark.parametrize(
    ("text", "count"), [("0-3", 4), ("0-3,8,10-11", 7), ("5", 1), ("", None), ("x-y", None)]
)
def test_cpu_lists_are_counted(text: str, count: int | None) -> None:
    assert cpu.parse_cpu_list(text) == count


@pytest.mark.parametrize(
    ("affinity", "quota", "usable"), [(8, None, 8), (8, 2.5, 2), (2, 4.0, 2), (4, 0.5, 1)]
)
def test_usable_cores_are_the_affinity_bounded_by_the_quota(
    affinity: int, quota: float | None, usable: int
) -> None:
    assert cpu.usable_cores(affinity, quota) == usable


def test_this_machine_is_probed_with_a_measured_copy() -> None:
    info = cpu.probe_cpu()
    assert info.logical_cpus == os.cpu_count()
    assert info.usable_cores is not None and 1 <= info.usable_cores <= len(os.sched_getaffinity(0))
    assert info.copy_bw_bytes_per_s is not None and info.copy_bw_bytes_per_s > 1e8  # DRAM, not a disk
    assert info.copy_bw_method is not None and "memcpy" in info.copy_bw_method
    assert info.features, "/proc/cpuinfo has flags on every Linux host"


def test_doctors_cpu_check_warns_where_bf16_is_emulated() -> None:
    snap = HardwareSnapshot(cpu=tree("epyc-avx2"))
    (check,) = checks.cpu_checks(snap.cpu, has_gpu=False)
    assert check.status == "warn" and "AMD EPYC 7B12" in check.message and "float32" in check.message
    (ok,) = checks.cpu_checks(tree("epyc-avx512-bf16"), has_gpu=False)
    assert ok.status == "ok" and "avx512_bf16" in ok.message
    assert checks.cpu_checks(None, has_gpu=False) == []
