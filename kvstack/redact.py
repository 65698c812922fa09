"""Secrets never leave kvstack in clear: not on screen, in logs, reports or dry-run output.

The credential-bearing parts of a URL are decided here, for every reader of a URL: the userinfo
password (``user:PASSWORD@``) and the value of every query parameter whose name says it holds a
credential (``?password=``, which redis-py sends as AUTH, ``token``, ``auth``, ``secret``, ``key``,
...). ``url_secrets`` lists them, ``redact_url`` and ``redact_text`` mask them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from urllib.parse import unquote, unquote_plus, urlsplit, urlunsplit

MASK = "***"
_SECRET_NAME = re.compile(r"(KEY|TOKEN|PASSWORD|PASSWD|SECRET|CREDENTIAL)", re.IGNORECASE)
_SECRET_FLAGS = frozenset({"--api-key", "--hf-token", "--token", "--password", "--redis-password"})
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<cred>[^/@\s]+)@")
# A query parameter holds a credential when its (decoded) name contains one of these; one that
# names a file or a path holding it (redis-py's ssl_keyfile) does not hold the secret itself.
_SECRET_PARAM = re.compile(r"pass|pwd|token|auth|secret|key|credential|signature", re.IGNORECASE)
_PATH_PARAM = re.compile(r"(file|path)$", re.IGNORECASE)
# A query parameter in a URL or in free text: "?name=value" or "&name=value".
_QUERY_PARAM = re.compile(r"(?P<pre>[?&](?P<name>[A-Za-z0-9_.%+\-]+)=)(?P<value>[^&#\s'\"<>]*)")


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def is_secret_param(name: str) -> bool:
    """Whether a URL query parameter of this name carries a credential (``password``, ``token``...)."""
    decoded = unquote_plus(name)
    return bool(_SECRET_PARAM.search(decoded)) and not _PATH_PARAM.search(decoded)


def _query_secrets(query: str) -> list[str]:
    out: list[str] = []
    for part in query.split("&"):
        name, eq, value = part.partition("=")
        if eq and value and is_secret_param(name):
            out += [value, unquote_plus(value), unquote(value)]
    return out


def url_secrets(url: str) -> list[str]:
    """Every credential a URL holds (the userinfo password, secret query values), as written and
    decoded, longest first: the values to mask wherever the URL's text might be echoed."""
    try:
        parts = urlsplit(url.strip())
        password = parts.password
    except ValueError:  # e.g. an unclosed "[": no userinfo that urlsplit can find
        parts, password = None, None
    found: list[str] = []
    if password:
        found += [password, unquote(password)]
    query = parts.query if parts is not None else url.partition("?")[2].partition("#")[0]
    found += _query_secrets(query)
    return sorted({s for s in found if s}, key=lambda s: (-len(s), s))


def has_url_secret(url: str) -> bool:
    """Whether the URL carries a credential: it must then stay off every command line."""
    return bool(url_secrets(url))


def _mask_query(text: str) -> str:
    def _param(m: re.Match[str]) -> str:
        if m.group("value") and is_secret_param(m.group("name")):
            return m.group("pre") + MASK
        return m.group(0)

    return _QUERY_PARAM.sub(_param, text)


def redact_url(url: str) -> str:
    """``redis://user:pw@host:6379/0?password=pw`` -> ``redis://user:***@host:6379/0?password=***``."""
    return _mask_query(_redact_userinfo(url))


def _redact_userinfo(url: str) -> str:
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

    out = _mask_query(_URL_CREDENTIALS.sub(_cred, text))
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
