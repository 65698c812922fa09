"""The remote store options every command that reaches Redis shares: --remote and --remote-file.

``kvstack.remote.source.resolve_remote(remote, remote_file)`` turns them (then KVSTACK_REMOTE_URL)
into the URL; a password in --remote warns once (argv is world-readable).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Remote = Annotated[
    str | None,
    typer.Option(
        "--remote",
        help="The remote KV store: a redis://, rediss://, redis-sentinel:// or lm:// URL. One with a "
        "password: use --remote-file or KVSTACK_REMOTE_URL instead (every local user reads argv).",
        show_default=False,
    ),
]
RemoteFile = Annotated[
    Path | None,
    typer.Option(
        "--remote-file",
        help="A file holding the remote store's URL (password included) on one line; keep it 0600.",
        show_default=False,
    ),
]
AllowMixedTier = Annotated[
    bool,
    typer.Option(
        "--allow-mixed-tier",
        help="Serve even when the shared tier's other writers store their KV otherwise (another chunk "
        "size, hash seed, KV dtype, ...): this engine's hits there are then its own. Refused by default.",
    ),
]
