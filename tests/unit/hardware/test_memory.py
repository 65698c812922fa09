from __future__ import annotations

import os
import re
from pathlib import Path

from kvstack.hardware import memory

from .fixtures import PROC

GPU_HOST = PROC / "gpu_host_v2"
CONTAINER = PROC / "container_v1"
K8S = PROC / "k8s_pod_v2"


def _kib(tree: Path, key: str) -> int:
    m = re.search(rf"^{key}:\s+(\d+) kB", (tree / "proc/meminfo").read_text(), re.M)
    assert m
    return int(m.group(1)) * 1024


def test_meminfo_is_read_in_bytes() -> None:
    info = memory.read_meminfo(GPU_HOST)
    assert info["MemTotal"] == _kib(GPU_HOST, "MemTotal")
    assert info["MemAvailable"] == _kib(GPU_HOST, "MemAvailable")
    assert info["Active(anon)"] == _kib(GPU_HOST, "Active\\(anon\\)")
    assert info["HugePages_Total"] == 0  # a count, not kB


def test_cgroup_v2_without_limit() -> None:
    assert memory.cgroup_memory_limit(GPU_HOST) == (2, None, None)


def test_cgroup_v2_takes_the_tightest_ancestor() -> None:
    # The pod slice (48 GiB) is tighter than the container's own memory.max (64 GiB).
    scope = (K8S / "proc/self/cgroup").read_text().strip().removeprefix("0::/")
    pod = (K8S / "sys/fs/cgroup" / scope).parent / "memory.max"
    assert memory.cgroup_memory_limit(K8S) == (2, int(pod.read_text()), None)


def test_cgroup_v1_inside_a_container_namespace() -> None:
    # The container sees its own cgroup at the mount point (mount root /docker/<id>).
    limit = int((CONTAINER / "sys/fs/cgroup/memory/memory.limit_in_bytes").read_text())
    assert memory.cgroup_memory_limit(CONTAINER) == (1, limit, None)


def test_cgroup_v1_no_limit_sentinel(tmp_path: Path) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text(
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    )
    (tmp_path / "proc/self/cgroup").write_text("4:memory:/process_api/abc\n")
    leaf = tmp_path / "sys/fs/cgroup/memory/process_api/abc"
    leaf.mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/memory/memory.limit_in_bytes").write_text("9223372036854771712\n")
    (leaf / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert memory.cgroup_memory_limit(tmp_path) == (1, None, None)
    (leaf.parent / "memory.limit_in_bytes").write_text(f"{16 * 1024**3}\n")
    assert memory.cgroup_memory_limit(tmp_path) == (1, 16 * 1024**3, None)


def test_cgroup_garbage_is_unknown_with_reason(tmp_path: Path) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text("41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    (tmp_path / "proc/self/cgroup").write_text("0::/\n")
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cgroup.controllers").write_text("memory pids\n")
    (tmp_path / "sys/fs/cgroup/memory.max").write_text("lots\n")
    version, limit, why = memory.cgroup_memory_limit(tmp_path)
    assert (version, limit) == (None, None)
    assert why is not None and "lots" in why


def test_cgroup2_without_memory_controller(tmp_path: Path) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text("41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cgroup.controllers").write_text("cpu pids\n")
    assert memory.cgroup_memory_limit(tmp_path) == (None, None, "no cgroup memory controller mounted")


def test_memlock_values() -> None:
    assert memory.memlock_limit(GPU_HOST) == (8 * 1024 * 1024, False, None)
    assert memory.memlock_limit(CONTAINER) == (64 * 1024, False, None)
    assert memory.memlock_limit(K8S) == (None, True, None)


def test_numa_nodes_and_shm() -> None:
    assert memory.numa_nodes(GPU_HOST) == 2
    assert memory.numa_nodes(CONTAINER) is None
    total, free, why = memory.shm_size(GPU_HOST)
    st = os.statvfs(GPU_HOST / "dev/shm")
    assert (total, free, why) == (st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize, None)


def test_probe_memory_collects_reasons(tmp_path: Path) -> None:
    info = memory.probe_memory(tmp_path)  # an empty tree: everything unknown, nothing raised
    assert info.total_bytes is None
    assert set(info.unknown) == {
        "total_bytes",
        "available_bytes",
        "cgroup_limit_bytes",
        "shm_bytes",
        "memlock_limit_bytes",
        "numa_nodes",
    }
    full = memory.probe_memory(CONTAINER)
    assert full.cgroup_version == 1 and full.memlock_limit_bytes == 65536
    assert set(full.unknown) == {"numa_nodes"}
