"""What an exporter takes and gives: ExportOptions in, a Bundle (file names, contents, modes) out.

Exporters are pure; ``kvstack.export.write`` puts a Bundle on disk.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from kvstack import __version__
from kvstack.remoteurl import HoldsRemote

METRICS_PORT = 9464  # kvstack's own /metrics (the KV canary's): systemd on 127.0.0.1, the sidecar's


class ExportOptions(HoldsRemote):
    """What the exporters take beside the Plan; the remote tier's URL as the user gave it (it may
    hold a password) as HoldsRemote carries it."""

    model_config = ConfigDict(extra="forbid")

    image: str | None = None  # "repository:tag" overriding the default engine image
    engine_version: str | None = None  # installed engine version, pins the image tag when known
    host: str = "127.0.0.1"  # address the server (or the published port) binds
    port: int = 8000
    name: str | None = None  # deployment name; default: from the model name
    # systemd: what `kvstack serve` is started with
    kvstack_bin: str = "kvstack"
    model_arg: str | None = None  # --model as the user gave it (default: plan.model.path)
    hardware_path: str | None = None  # absolute
    workload_name: str | None = None
    tuned_path: str | None = None  # absolute: the kvstack tune --out DIR the plan took its layout from
    user: str | None = None
    env_file: str = "/etc/kvstack/kvstack.env"  # absolute path of the unit's EnvironmentFile
    # The KV canary: its /metrics port (systemd: kvstack serve --metrics-port; Compose and Helm: the
    # sidecar's) and the sidecar's image, built from deploy/canary.Dockerfile
    metrics_port: int = Field(default=METRICS_PORT, ge=1, le=65535)
    canary_image: str = f"kvstack:{__version__}"


class ExportFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str  # relative to the output directory, no directories
    content: str
    mode: int = 0o644
    secret: bool = False  # holds a secret: written 0600, never printed


class Bundle(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: str
    files: list[ExportFile]
    notes: list[str] = Field(default_factory=list)

    @property
    def main(self) -> ExportFile:
        return self.files[0]
