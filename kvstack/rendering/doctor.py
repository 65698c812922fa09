"""Terminal rendering of a hardware snapshot (the default output of `kvstack doctor`)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

from rich.console import Console
from rich.markup import escape
from rich.status import Status
from rich.table import Table

from kvstack.hardware.calibrate import Calibration, calibration_of
from kvstack.hardware.checks import cores_text
from kvstack.hardware.gpu import architecture
from kvstack.hardware.snapshot import CpuInfo, HardwareSnapshot, MemoryInfo, RemoteInfo
from kvstack.rendering.console import err_console, out_console
from kvstack.units import fmt_bw, fmt_bytes, fmt_tokens

VERDICT_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def _yes_no(value: bool | None) -> str:
    return "unknown" if value is None else "yes" if value else "no"


def _opt(value: object) -> str:
    return "unknown" if value is None else str(value)


def _status(text: str) -> Status:
    """A live line on standard error while a probe runs."""
    return err_console(soft_wrap=False, highlight=True).status(text)


@contextlib.contextmanager
def probing_status(enabled: bool, fio_seconds: float | None) -> Iterator[None]:
    """A spinner on stderr while fio runs (only on a terminal: it would litter logs)."""
    if not enabled or not sys.stderr.isatty():
        yield
        return
    with _status(f"probing (fio up to {fio_seconds:g} s per disk)..."):
        yield


@contextlib.contextmanager
def calibrating_status(enabled: bool, seconds: float) -> Iterator[None]:
    if not enabled or not sys.stderr.isatty():
        yield
        return
    with _status(f"calibrating with torch (up to {seconds:g} s)..."):
        yield


@contextlib.contextmanager
def remote_status(enabled: bool) -> Iterator[None]:
    if not enabled or not sys.stderr.isatty():
        yield
        return
    with _status("probing the remote store..."):
        yield


def gpu_table(snap: HardwareSnapshot) -> Table:
    t = Table(title="GPUs", title_justify="left")
    columns = ("#", "name", "CC", "arch", "HBM total", "HBM free", "PCIe now/max", "NVLink", "MIG", "driver")
    for col in columns:
        t.add_column(col)
    for g in snap.gpus:
        cc = g.compute_capability
        pcie = f"Gen{_opt(g.pcie_gen_current)} x{_opt(g.pcie_width_current)}"
        pcie += f" / Gen{_opt(g.pcie_gen_max)} x{_opt(g.pcie_width_max)}"
        t.add_row(
            str(g.index),
            escape(g.name),
            f"{cc[0]}.{cc[1]}" if cc else "unknown",
            architecture(cc) or "unknown",
            fmt_bytes(g.memory_total_bytes),
            fmt_bytes(g.memory_free_bytes),
            pcie,
            _opt(g.nvlink_links),
            _yes_no(g.mig_enabled),
            _opt(g.driver_version),
        )
    return t


def cpu_table(cpu: CpuInfo) -> Table:
    t = Table(title="CPU", title_justify="left", show_header=False)
    t.add_column("what")
    t.add_column("value", overflow="fold")
    copy = fmt_bw(cpu.copy_bw_bytes_per_s) if cpu.copy_bw_bytes_per_s is not None else "not measured"
    rows = [
        ("model", _opt(cpu.model)),
        ("cores", cores_text(cpu)),
        ("NUMA nodes", _opt(cpu.numa_nodes)),
        ("instruction set", f"{cpu.isa} ({' '.join(cpu.features) or 'no tracked flags'})"),
        ("bf16 arithmetic", cpu.bf16_native or "none (emulated)"),
        ("vLLM CPU kernels", cpu.vllm_kernels or "none for this instruction set"),
        ("DRAM copy", copy + (f" ({cpu.copy_bw_method})" if cpu.copy_bw_method else "")),
    ]
    for k, v in rows:
        t.add_row(k, escape(v))
    return t


def memory_table(mem: MemoryInfo) -> Table:
    t = Table(title="Memory", title_justify="left", show_header=False)
    t.add_column("what")
    t.add_column("value")
    cgroup = "none" if mem.cgroup_limit_bytes is None else fmt_bytes(mem.cgroup_limit_bytes)
    if "cgroup_limit_bytes" in mem.unknown:
        cgroup = f"unknown ({mem.unknown['cgroup_limit_bytes']})"
    elif mem.cgroup_version is not None:
        cgroup += f" (cgroup v{mem.cgroup_version})"
    memlock = "unlimited" if mem.memlock_unlimited else fmt_bytes(mem.memlock_limit_bytes)
    rows = [
        ("RAM total", fmt_bytes(mem.total_bytes)),
        ("RAM available", fmt_bytes(mem.available_bytes)),
        ("cgroup limit", cgroup),
        ("/dev/shm", f"{fmt_bytes(mem.shm_bytes)} ({fmt_bytes(mem.shm_free_bytes)} free)"),
        ("locked-memory limit", memlock),
        ("NUMA nodes", _opt(mem.numa_nodes)),
    ]
    for k, v in rows:
        t.add_row(k, escape(v))
    return t


def disk_table(snap: HardwareSnapshot) -> Table:
    t = Table(title="Disks (candidate cache locations)", title_justify="left")
    for col in ("path", "mount (fs)", "device", "kind", "free / total", "read bw"):
        t.add_column(col, overflow="fold")
    for d in snap.disks:
        kind = "tmpfs (RAM)" if d.tmpfs else "NVMe" if d.nvme else "HDD" if d.rotational else "SSD/other"
        if d.nvme is None and d.rotational is None and not d.tmpfs:
            kind = "unknown"
        bw = fmt_bw(d.read_bw_bytes_per_s) if d.read_bw_bytes_per_s is not None else "see below"
        cells = [d.path, f"{_opt(d.mount)} ({_opt(d.fstype)})", _opt(d.device), kind]
        cells += [f"{fmt_bytes(d.free_bytes)} / {fmt_bytes(d.total_bytes)}", bw]
        t.add_row(*(escape(c) for c in cells))
    return t


def disk_notes(snap: HardwareSnapshot) -> list[str]:
    """How each figure was measured, or why there is none (too long for a table cell)."""
    notes = []
    for d in snap.disks:
        if d.read_bw_bytes_per_s is not None:
            notes.append(f"{d.path}: {d.read_bw_method or 'measured'}")
        else:
            notes.append(f"{d.path}: read bandwidth {d.unknown.get('read_bw_bytes_per_s', 'unknown')}")
        notes.extend(f"{d.path}: {n}" for n in d.read_bw_notes)
    return notes


def software_table(snap: HardwareSnapshot) -> Table:
    sw = snap.software
    t = Table(title="Software", title_justify="left", show_header=False)
    t.add_column("what")
    t.add_column("version")
    vllm = f"{sw.vllm} ({sw.vllm_distribution})" if sw.vllm else None
    rows = [
        ("python", sw.python),
        ("vllm", vllm),
        ("sglang", sw.sglang),
        ("lmcache", sw.lmcache),
        ("nixl", sw.nixl),
        ("torch", sw.torch),
        ("fio", sw.fio),
        ("redis-server", sw.redis_server),
    ]
    for name, version in rows:
        t.add_row(name, escape(version) if version else "[dim]not installed[/dim]")
    return t


def remote_table(info: RemoteInfo) -> Table:
    """The remote store as probed; ``info.url`` is already redacted (RemoteInfo never holds a password)."""
    t = Table(title="Remote KV store", title_justify="left", show_header=False)
    t.add_column("what")
    t.add_column("value", overflow="fold")
    if info.maxmemory_bytes is None:
        maxmemory = "unknown"
    else:
        maxmemory = "0 (no limit)" if info.maxmemory_bytes == 0 else fmt_bytes(info.maxmemory_bytes)
    rows = [
        ("url", info.url),
        ("reachable", _yes_no(info.reachable)),
        ("server", f"Redis {info.server_version}" if info.server_version else "unknown"),
        ("latency (median)", f"{info.latency_s * 1e3:.2f} ms" if info.latency_s is not None else "unknown"),
        ("read / write", f"{_bw(info.read_bw_bytes_per_s)} / {_bw(info.write_bw_bytes_per_s)}"),
        ("maxmemory", maxmemory),
        ("eviction policy", _opt(info.maxmemory_policy)),
    ]
    if info.error:
        rows.append(("error", info.error))
    for k, v in rows:
        t.add_row(k, escape(v))
    return t


def _bw(value: float | None) -> str:
    return fmt_bw(value) if value is not None else "unknown"


def checks_table(snap: HardwareSnapshot) -> Table:
    t = Table(title="Checks", title_justify="left")
    t.add_column("verdict")
    t.add_column("check")
    t.add_column("message", overflow="fold")
    for c in snap.checks:
        style = VERDICT_STYLE[c.status]
        t.add_row(f"[{style}]{c.status.upper()}[/{style}]", escape(c.name), escape(c.message))
    return t


def _bw_or_why(value: float | None, unknown: dict[str, str], key: str) -> str:
    return fmt_bw(value) if value is not None else f"- ({unknown.get(key, 'not measured')})"


def calibration_table(cal: Calibration) -> Table:
    """Measured figures, one per row: what the planner uses instead of its table estimates."""
    cuda = f", CUDA {cal.cuda_version}" if cal.cuda_version else ""
    title = f"Calibration ({cal.source} on {cal.device}: {cal.device_name}, torch {cal.torch_version}{cuda})"
    t = Table(title=title, title_justify="left")
    t.add_column("figure")
    t.add_column("value", overflow="fold")
    rows: list[tuple[str, str]] = []
    if cal.host_copy is not None:
        c = cal.host_copy
        for key, label in (
            ("h2d_pinned_bytes_per_s", "host->device, pinned"),
            ("h2d_pageable_bytes_per_s", "host->device, pageable"),
            ("d2h_pinned_bytes_per_s", "device->host, pinned"),
            ("d2h_pageable_bytes_per_s", "device->host, pageable"),
        ):
            value = _bw_or_why(getattr(c, key), c.unknown, key)
            rows.append((f"{label} ({fmt_bytes(c.transfer_bytes)})", value))
    for d in cal.disks:
        for key, label in (
            ("bounce_bytes_per_s", "pinned bounce"),
            ("direct_bytes_per_s", "O_DIRECT"),
            ("plain_bytes_per_s", "plain"),
            ("gds_bytes_per_s", "cuFile/GDS"),
        ):
            rows.append((f"disk {d.path} -> device, {label}", _bw_or_why(getattr(d, key), d.unknown, key)))
    if cal.prefill is not None:
        p = cal.prefill
        scaled = ", scaled down" if p.scaled_down else ""
        for point in p.points:
            peak = f", {point.peak_fraction:.0%} of peak" if point.peak_fraction is not None else ""
            rows.append(
                (
                    f"prefill {p.model} ({p.dtype}{scaled}) at {fmt_tokens(point.prompt_tokens)} tokens",
                    f"{point.tokens_per_s:,.0f} tokens/s ({point.achieved_tflops:.3g} TFLOP/s{peak})",
                )
            )
    if cal.effective_tflops is not None:
        rows.append(("effective prefill rate (planner)", f"{cal.effective_tflops:.3g} TFLOP/s"))
    if cal.sanity is not None:
        sn = cal.sanity
        membw = _bw_or_why(sn.memory_bw_bytes_per_s, sn.unknown, "memory_bw_bytes_per_s")
        rows.append(("device memory bandwidth (copy)", membw))
        matmul = f"{sn.matmul_tflops:.3g} TFLOP/s" if sn.matmul_tflops is not None else "-"
        rows.append((f"matmul {sn.matmul_size}^3 {sn.matmul_dtype}", matmul))
    for label, value in rows:
        t.add_row(escape(label), escape(value))
    return t


def calibration_notes(cal: Calibration) -> list[str]:
    notes = [f"{section}: {why}" for section, why in cal.unknown.items()]
    notes += cal.notes
    if cal.prefill is not None:
        notes += [f"prefill: {why}" for why in cal.prefill.unknown.values()]
    for d in cal.disks:
        notes += [f"{d.path}: {n}" for n in d.notes]
    return notes


def render(snap: HardwareSnapshot, console: Console | None = None) -> None:
    out = console or out_console(None, soft_wrap=False, highlight=True)
    if snap.gpus:
        out.print(gpu_table(snap))
    else:
        out.print(f"[bold]GPUs[/bold]: none visible ({escape(snap.gpu_reason or 'no reason given')})")
    if snap.cpu is not None:
        out.print(cpu_table(snap.cpu))
    out.print(memory_table(snap.memory))
    out.print(disk_table(snap))
    for note in disk_notes(snap):
        out.print(f"  [dim]{escape(note)}[/dim]")
    out.print(software_table(snap))
    if snap.remote is not None:
        out.print(remote_table(snap.remote))
    out.print(checks_table(snap))
    cal = calibration_of(snap)
    if cal is not None:
        out.print(calibration_table(cal))
        for note in calibration_notes(cal):
            out.print(f"  [dim]{escape(note)}[/dim]")
    if snap.summary:
        out.print(f"[bold]Summary:[/bold] {escape(snap.summary)}")
