"""`kvstack export`'s own flags (the plan's are serving.plan_inputs'), and the ExportOptions they make."""

from __future__ import annotations

import getpass
import os
import shutil
import sys
from pathlib import Path
from typing import Annotated

from kvstack.export import FORMATS
from kvstack.export.bundle import ExportOptions
from kvstack.flags import Inputs, flag
from kvstack.netaddr import check_port
from kvstack.remoteurl import RemoteURL


def kvstack_bin() -> str:
    """Absolute path of this kvstack (systemd runs ExecStart without the caller's PATH)."""
    beside = Path(sys.executable).with_name("kvstack")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("kvstack") or "kvstack"


def _absolute(path: Path | None) -> str | None:
    return str(path.expanduser().resolve()) if path is not None else None


class ExportInputs(Inputs):
    fmt: Annotated[
        str,
        flag(
            "--format",
            "-f",
            help="helm, compose, systemd, kserve, llm-d or lmcache-operator.",
            choices=FORMATS,
        ),
    ]
    host: Annotated[str, flag("--host", help="Address the API binds (compose: the published port).")] = (
        "127.0.0.1"
    )
    port: Annotated[int, flag("--port", help="Port the API is served on.")] = 8000
    image: Annotated[str | None, flag("--image", help="Engine image REPO:TAG (default: by engine).")] = None
    name: Annotated[str | None, flag("--name", help="Deployment name (default: from the model).")] = None
    out: Annotated[Path | None, flag("--out", help="Write the files into this directory.")] = None
    force: Annotated[bool, flag("--force", help="Replace files that already exist in --out.")] = False

    def options(
        self,
        *,
        remote: RemoteURL | None,
        engine_version: str | None,
        model_arg: str,
        hardware: Path | None,
        workload: str | None,
        tuned: Path | None,
    ) -> ExportOptions:
        """What the exporters take: these flags, the plan's inputs they repeat (systemd runs
        `kvstack serve` with them), and the installed engine's version (pins the image tag)."""
        check_port(self.port)
        user = getpass.getuser()
        options = ExportOptions(
            remote=remote,
            image=self.image,
            engine_version=engine_version,
            host=self.host,
            port=self.port,
            name=self.name,
            kvstack_bin=kvstack_bin(),
            model_arg=model_arg,
            hardware_path=_absolute(hardware),
            workload_name=workload,
            tuned_path=_absolute(tuned),
            user=None if user == "root" else user,
        )
        if self.out is not None:  # the unit reads the env file written beside it
            env_file = str((self.out / "kvstack.env").expanduser().resolve())
            options.env_file = env_file  # options: built just above
        return options
