"""`kvstack doctor`: what this machine has and what it can serve."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated

import typer

from kvstack.cli.flags import Pick, command
from kvstack.errors import InputError, ProbeError
from kvstack.remote.source import RemoteInputs

# Explicit only: a KVSTACK_REMOTE_URL in the environment does not make doctor reach out.
DoctorRemote = Annotated[
    RemoteInputs,
    Pick(
        help={
            "remote": "Also probe this remote KV store, redis://user:pass@host:port/db (user, pass, db "
            "optional; or rediss://, redis-sentinel://, lm://): latency, bandwidth, maxmemory, eviction.",
        }
    ),
]


def _fio_budget(fio_seconds: float, no_fio: bool) -> float | None:
    if not math.isfinite(fio_seconds) or fio_seconds <= 0:
        raise InputError(
            f"--fio-seconds must be a positive number of seconds, not {fio_seconds:g}",
            hint="e.g. --fio-seconds 10, or --no-fio to skip the disk measurement",
        )
    return None if no_fio else fio_seconds


def _calibration_device(calibrate: bool, seconds: float) -> str | None:
    """The device to calibrate on, checked before probing so that a missing GPU fails fast."""
    if not calibrate:
        return None
    if not math.isfinite(seconds) or seconds <= 0:
        raise InputError(
            f"--calibrate-seconds must be a positive number of seconds, not {seconds:g}",
            hint="e.g. --calibrate-seconds 120",
        )
    # torch is imported on this path only: plain `kvstack doctor` never pays for it.
    from kvstack.hardware.calibrate.run import resolve_device

    return resolve_device()


def register(app: typer.Typer) -> None:
    @command(app, "doctor")
    def _cmd(
        remote_inputs: DoctorRemote,
        json_out: Annotated[
            bool, typer.Option("--json", help="Print the hardware snapshot as JSON (for --hardware FILE).")
        ] = False,
        path: Annotated[
            list[Path] | None,
            typer.Option(
                "--path", help="Cache directory to check (repeatable; default: every writable disk)."
            ),
        ] = None,
        fio_seconds: Annotated[
            float, typer.Option("--fio-seconds", help="Time bound of the fio read test, per path.")
        ] = 10.0,
        no_fio: Annotated[bool, typer.Option("--no-fio", help="Skip the disk bandwidth test.")] = False,
        strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when any check fails.")] = False,
        calibrate: Annotated[
            bool,
            typer.Option(
                "--calibrate",
                help="Also measure copy, disk->GPU, prefill and GPU rates with torch (needs a CUDA GPU).",
            ),
        ] = False,
        calibrate_seconds: Annotated[
            float, typer.Option("--calibrate-seconds", help="Time bound of the calibration, in all.")
        ] = 120.0,
    ) -> None:
        """Probe GPUs, memory, disks and software, and say what this machine can serve."""
        remote = remote_inputs.url(check=True, from_env=False)  # malformed: exit 2 before any probe
        budget = _fio_budget(fio_seconds, no_fio)
        if path:
            from kvstack.hardware.disk import require_existing_dirs

            require_existing_dirs(path)
        device = _calibration_device(calibrate, calibrate_seconds)
        # Imported here so that `kvstack --help` never pays for pydantic and the probes.
        from kvstack.hardware.checks import any_failed
        from kvstack.hardware.probe import probe
        from kvstack.rendering.doctor import calibrating_status, probing_status, render

        with probing_status(enabled=not json_out and budget is not None, fio_seconds=budget):
            snap = probe(path or None, budget)
        if device is not None:
            from kvstack.hardware.calibrate import store_calibration
            from kvstack.hardware.calibrate.run import calibrate as run_calibration

            with calibrating_status(enabled=not json_out, seconds=calibrate_seconds):
                store_calibration(snap, run_calibration(snap, device, calibrate_seconds))
        if remote is not None:
            from kvstack.remote.checks import remote_checks, writer_checks
            from kvstack.remote.preflight import preflight as probe_remote
            from kvstack.remote.writers import recorded_layouts
            from kvstack.rendering.doctor import remote_status

            with remote_status(enabled=not json_out):
                snap.remote = probe_remote(remote)
                if snap.remote.reachable and snap.remote.server_version is not None:
                    snap.remote.kv_layouts = recorded_layouts(remote)
            snap.checks = [*snap.checks, *remote_checks(snap.remote), *writer_checks(snap.remote)]
        if json_out:
            sys.stdout.write(snap.to_json() + "\n")
        else:
            render(snap)
        if strict and any_failed(snap.checks):
            failed = ", ".join(c.name for c in snap.checks if c.status == "fail")
            raise ProbeError(f"--strict: failed checks: {failed}", hint="fix them (see the report above)")
