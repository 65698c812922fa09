"""Which connectors can use a remote KV tier, and how (the URL itself: kvstack/remoteurl.py)."""

from __future__ import annotations

from kvstack.connectors import SPECS, remote_capable
from kvstack.errors import UnsupportedError
from kvstack.remoteurl import RemoteURL

# Connectors that can use a remote tier, and how they wire it (ConnectorSpec.remote_backend).
REMOTE_CONNECTORS: dict[str, str] = {s.name: s.remote_backend for s in remote_capable()}


def require_remote_support(connector: str, url: RemoteURL) -> None:
    """Refuse a connector that cannot use this remote tier, naming the ones that can."""
    spec = SPECS.get(connector)
    if spec is None or not spec.remote:
        which = "; ".join(f"{name}: {how}" for name, how in REMOTE_CONNECTORS.items())
        offloads = " or ".join(f"--offload {name}" for name in REMOTE_CONNECTORS)
        raise UnsupportedError(
            f"connector '{connector}' has no remote tier, so --remote {url.redacted()} cannot be used",
            hint=f"use {offloads} ({which}), or drop --remote",
        )
    if spec.remote_schemes or spec.remote_db0_only:
        # Only LMCache MP's backend is narrower than every form (ConnectorSpec.remote_schemes: its
        # RESPL2AdapterConfig takes no TLS, no sentinel, no database index); the message names it.
        problem = None
        if spec.remote_schemes and url.scheme not in spec.remote_schemes:
            problem = f"{url.scheme}:// URLs"
        elif spec.remote_db0_only and url.db not in (None, 0):
            problem = "a database index other than 0"
        if problem:
            raise UnsupportedError(
                f"LMCache MP's resp L2 adapter does not support {problem} ({url.redacted()})",
                hint="use a plain redis://[user:pass@]host:port URL, or --offload lmcache (in-process)",
            )
