"""`kvstack doctor`: what this machine has and what it can serve."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from kvstack.cli.flags import Pick, command
from kvstack.errors import ProbeError
from kvstack.hardware.inputs import DoctorInputs
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

DoctorFlags = Annotated[
    DoctorInputs, Pick(help={"as_json": "Print the hardware snapshot as JSON (for --hardware FILE)."})
]


def _calibration_device(calibrate: bool) -> str | None:
    """The device to calibrate on, checked before probing so that a missing GPU fails fast."""
    if not calibrate:
        return None
    # torch is imported on this path only: plain `kvstack doctor` never pays for it.
    from kvstack.hardware.calibrate.run import resolve_device

    return resolve_device()


def register(app: typer.Typer) -> None:
    @command(app, "doctor")
    def _cmd(
        remote_inputs: DoctorRemote,
        doctor: DoctorFlags,
    ) -> None:
        """Probe GPUs, memory, disks and software, and say what this machine can serve."""
        remote = remote_inputs.url(check=True, from_env=False)  # malformed: exit 2 before any probe
        budget, path, json_out = doctor.fio_budget, doctor.path, doctor.as_json
        if path:
            from kvstack.hardware.disk import require_existing_dirs

            require_existing_dirs(path)
        device = _calibration_device(doctor.calibrate)
        # Imported here so that `kvstack --help` never pays for pydantic and the probes.
        from kvstack.hardware.checks import any_failed
        from kvstack.hardware.probe import probe
        from kvstack.rendering.doctor import calibrating_status, probing_status, render

        with probing_status(enabled=not json_out and budget is not None, fio_seconds=budget):
            snap = probe(path or None, budget)
        if device is not None:
            from kvstack.hardware.calibrate import store_calibration
            from kvstack.hardware.calibrate.run import calibrate as run_calibration

            with calibrating_status(enabled=not json_out, seconds=doctor.calibrate_seconds):
                store_calibration(snap, run_calibration(snap, device, doctor.calibrate_seconds))
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
        if doctor.strict and any_failed(snap.checks):
            failed = ", ".join(c.name for c in snap.checks if c.status == "fail")
            raise ProbeError(f"--strict: failed checks: {failed}", hint="fix them (see the report above)")
