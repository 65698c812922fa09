"""Secrets never leave kvstack in clear: not on screen, in logs, reports or dry-run output."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
_SECRET_NAME = re.compile(r"(KEY|TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIAL)", re.IGNORECASE)
_SECRET_FLAGS = frozenset({"--api-key", "--hf-token", "--token", "--password", "--redis-password"})
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<cred>[^/@\s]+)@")


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_url(url: str) -> str:
    """``redis://user:pw@host:6379/0`` -> ``redis://user:***@host:6379/0``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # e.g. redis-sentinel://u:pw@h1:1,h2:2 has no single port
        return redact_text(url)
    if parts.password is None and parts.username is None:
        if not parts.netloc and "@" in url:  # no "scheme://": what precedes "@" may be a password
            return f"{MASK}@{url.rpartition('@')[2]}"
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal: keep the brackets urlsplit removed
        host = f"[{host}]"
    if port is not None:
        host = f"{host}:{port}"
    cred = f"{user}:{MASK}" if parts.password is not None else MASK
    return urlunsplit((parts.scheme, f"{cred}@{host}", parts.path, parts.query, parts.fragment))


def redact_text(text: str, secrets: Sequence[str] = ()) -> str:
    """Mask URL credentials and every known secret value in free text (e.g. a log line)."""

    def _cred(m: re.Match[str]) -> str:
        cred = m.group("cred")
        user = cred.split(":", 1)[0] if ":" in cred else ""
        return f"{m.group('scheme')}{user + ':' if user else ''}{MASK}@"

    out = _URL_CREDENTIALS.sub(_cred, text)
    for secret in secrets:
        if secret and len(secret) >= 4:
            out = out.replace(secret, MASK)
    return out


def redact_env(env: Mapping[str, str], secrets: Sequence[str] = ()) -> dict[str, str]:
    return {k: (MASK if is_secret_name(k) and v else redact_text(v, secrets)) for k, v in env.items()}


def redact_argv(argv: Sequence[str], secrets: Sequence[str] = ()) -> list[str]:
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        flag, eq, _value = arg.partition("=")
        if flag in _SECRET_FLAGS:
            if eq:
                out.append(f"{flag}={MASK}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_text(arg, secrets))
    return out
