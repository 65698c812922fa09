"""Probes of this machine: GPUs (NVML), memory, disks (+ fio), software. Each fails soft."""
