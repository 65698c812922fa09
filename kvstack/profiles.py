"""Where the bundled profiles live: ``profiles/`` next to the package, or ``$KVSTACK_PROFILES``."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "KVSTACK_PROFILES"


def profiles_dir() -> Path:
    """The profiles directory (models.yaml, workloads/, hardware/, demo/).

    An editable install and a source checkout both keep ``profiles/`` beside ``kvstack/``;
    ``KVSTACK_PROFILES`` points elsewhere (a wheel install, or a user's own catalog).
    """
    override = os.environ.get(ENV_VAR, "").strip()
    if override:
        return Path(override).expanduser().resolve()
    return Path(__file__).resolve().parent.parent / "profiles"
