"""The per-run control token: what lets kvstack, and nobody else, call an engine's control routes.

``serve`` draws a random token for each vLLM it starts, hands it to the engine's guard middleware in
its environment (KVSTACK_CONTROL_TOKEN, as the key goes), and keeps it in ``RUN_DIR/control-token``
(0600, in the 0700 run dir). The guard then answers a control route (/reset_prefix_cache,
/collective_rpc, /sleep, ...) only with the token in the ``X-Kvstack-Control`` header, on loopback
too, key or no key: any local user reaches 127.0.0.1, none can read the token.

Clients find it two ways: ``read_control_token(run_dir)`` for a command given the run dir, and
``token_for(base_url)`` (used by ``clients.client.make_client``) for any kvstack client talking to a
server this user's ``serve`` started: serve publishes base URL -> token in-process and in a 0600 file
under the user's 0700 state dir, and withdraws it when it stops.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit

from kvstack.fsutil import atomic_write, ensure_private_dir
from kvstack.names import CONTROL_ENV, CONTROL_HEADER
from kvstack.netaddr import reaches_local
from kvstack.rundir import CONTROL_TOKEN

__all__ = ["CONTROL_ENV", "CONTROL_HEADER", "TOKEN_FILE", "control_headers", "read_control_token"]

TOKEN_FILE = CONTROL_TOKEN
_published: dict[str, str] = {}


def new_token() -> str:
    return secrets.token_urlsafe(32)


def write_control_token(run_dir: Path, token: str) -> Path:
    path = ensure_private_dir(run_dir) / TOKEN_FILE
    atomic_write(path, token + "\n", mode=0o600)
    return path


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def read_control_token(run_dir: Path | str) -> str | None:
    """The token of the run in ``run_dir`` (None: no token, or not readable by this user)."""
    return _read(Path(run_dir) / TOKEN_FILE)


def control_headers(token: str | None) -> dict[str, str]:
    """The header a control request carries: ``{"X-Kvstack-Control": token}``, or nothing."""
    return {CONTROL_HEADER: token} if token else {}


def state_dir() -> Path:
    """This user's kvstack state directory (XDG_STATE_HOME)."""
    base = os.environ.get("XDG_STATE_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".local" / "state") / "kvstack"


def _index_dir() -> Path:
    return state_dir() / "control"


def server_key(base_url: str) -> str:
    """One name per server: every loopback spelling of it is the same."""
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    if reaches_local(host):  # every name of this machine's loopback (netaddr's list) is one server
        host = "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return hashlib.sha256(f"{host}:{port}".encode()).hexdigest()[:24]


def publish(base_url: str, token: str) -> None:
    """This user's kvstack clients of ``base_url`` send ``token`` from now on."""
    key = server_key(base_url)
    _published[key] = token
    with contextlib.suppress(OSError):  # in-process still works; other commands use --run-dir
        atomic_write(ensure_private_dir(_index_dir()) / key, token + "\n", mode=0o600)


def remember(base_url: str, token: str) -> None:
    """This process's clients of ``base_url`` send ``token`` (read from a run dir the user named);
    nothing is written."""
    _published[server_key(base_url)] = token


def withdraw(base_url: str, token: str) -> None:
    key = server_key(base_url)
    if _published.get(key) == token:
        del _published[key]
    path = _index_dir() / key
    if _read(path) == token:
        with contextlib.suppress(OSError):
            path.unlink()


def token_for(base_url: str) -> str | None:
    """The control token of the server at ``base_url``, when this user's serve started it."""
    key = server_key(base_url)
    return _published.get(key) or _read(_index_dir() / key)
