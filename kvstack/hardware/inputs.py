"""``kvstack doctor``'s own flags (the remote store's are remote.source.RemoteInputs'), checked when
made: what to probe, for how long, and how to report it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Self

from pydantic import model_validator

from kvstack.errors import InputError
from kvstack.flags import Inputs, Json, flag


class DoctorInputs(Inputs):
    as_json: Json
    path: Annotated[
        list[Path] | None,
        flag("--path", help="Cache directory to check (repeatable; default: every writable disk)."),
    ] = None
    fio_seconds: Annotated[
        float, flag("--fio-seconds", help="Time bound of the fio read test, per path.")
    ] = 10.0
    no_fio: Annotated[bool, flag("--no-fio", help="Skip the disk bandwidth test.")] = False
    strict: Annotated[bool, flag("--strict", help="Exit 1 when any check fails.")] = False
    calibrate: Annotated[
        bool,
        flag(
            "--calibrate",
            help="Also measure copy, disk->GPU, prefill and GPU rates with torch (needs a CUDA GPU).",
        ),
    ] = False
    calibrate_seconds: Annotated[
        float, flag("--calibrate-seconds", help="Time bound of the calibration, in all.")
    ] = 120.0

    @model_validator(mode="after")
    def _check(self) -> Self:
        if not math.isfinite(self.fio_seconds) or self.fio_seconds <= 0:
            raise InputError(
                f"--fio-seconds must be a positive number of seconds, not {self.fio_seconds:g}",
                hint="e.g. --fio-seconds 10, or --no-fio to skip the disk measurement",
            )
        if self.calibrate and (not math.isfinite(self.calibrate_seconds) or self.calibrate_seconds <= 0):
            raise InputError(
                f"--calibrate-seconds must be a positive number of seconds, not {self.calibrate_seconds:g}",
                hint="e.g. --calibrate-seconds 120",
            )
        return self

    @property
    def fio_budget(self) -> float | None:
        """Seconds of fio per path (None: --no-fio)."""
        return None if self.no_fio else self.fio_seconds
