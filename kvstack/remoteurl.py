"""Remote KV tier URLs: parse, validate and redact them, once, where the URL enters kvstack.

The accepted forms are the ones LMCache's remote connectors parse (lmcache 0.5.6,
``lmcache/v1/storage_backend/connector/__init__.py`` ``CreateConnector`` docstring and
``parse_remote_url``, which asserts that every URL has a host AND a port). Which connectors can
use such a URL is kvstack/remote/url.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated
from urllib.parse import parse_qs, unquote

from pydantic import BaseModel, Field, PlainValidator, model_validator

from kvstack.errors import NetworkTargetError, UnsupportedError
from kvstack.netaddr import PORT_RANGE, is_loopback, parse_port
from kvstack.redact import redact_url, url_secrets

SCHEMES: tuple[str, ...] = ("redis", "rediss", "redis-sentinel", "lm")
ACCEPTED_FORMS = (
    "redis://[user:pass@]host:port[/db], rediss://[user:pass@]host:port[/db], "
    "redis-sentinel://[user:pass@]host:port[,host:port...][/service], lm://host:port"
)


@dataclass(frozen=True)
class RemoteURL:
    scheme: str
    hosts: tuple[tuple[str, int], ...]  # sentinel: every sentinel; otherwise exactly one
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    db: int | None = None  # redis/rediss only
    service: str | None = None  # redis-sentinel only: the master's service name, when given
    query: str = field(default="", repr=False)  # after "?", as given (may hold ?password=)
    raw: str = field(default="", repr=False)

    @property
    def host(self) -> str:
        return self.hosts[0][0]

    @property
    def port(self) -> int:
        return self.hosts[0][1]

    @property
    def is_redis(self) -> bool:
        return self.scheme != "lm"

    @property
    def secrets(self) -> list[str]:
        """Every credential in the URL (the userinfo password, secret query values such as
        ``?password=``), raw and decoded: the values to mask in any text that might echo them."""
        return url_secrets(self.raw)

    @property
    def has_secret(self) -> bool:
        """The URL carries a credential: it goes through an environment or a 0600 file only."""
        return bool(self.secrets)

    @property
    def auth_password(self) -> str | None:
        """The password a Redis client sends (redis-py ``from_url``, which LMCache uses): the
        userinfo password, decoded, else the ``?password=`` query value."""
        if self.password is not None:
            return unquote(self.password)
        values = parse_qs(self.query).get("password")
        return values[0] if values and values[0] else None

    def redacted(self) -> str:
        return redact_url(self.raw)

    def is_loopback(self) -> bool:
        return all(is_loopback(h) for h, _ in self.hosts)

    def with_endpoint(self, host: str, port: int) -> str:
        """The same URL, credentials and query included, pointed at ``host:port`` (e.g. a compose
        service name)."""
        if self.scheme == "redis-sentinel":
            raise UnsupportedError(
                "a redis-sentinel:// URL cannot be re-pointed at one host",
                hint="use redis://host:port for a Redis that the deployment runs itself",
            )
        cred = ""
        if self.username or self.password:
            cred = (self.username or "") + (f":{self.password}" if self.password else "") + "@"
        hostpart = f"[{host}]" if ":" in host else host
        db = f"/{self.db}" if self.db is not None else ""
        query = f"?{self.query}" if self.query else ""
        return f"{self.scheme}://{cred}{hostpart}:{port}{db}{query}"


def _bad(url_shown: str, why: str) -> NetworkTargetError:
    return NetworkTargetError(
        f"remote URL {url_shown} is malformed: {why}",
        hint=f"use one of: {ACCEPTED_FORMS}",
    )


def _host_port(text: str, shown: str) -> tuple[str, int]:
    if text.startswith("["):  # IPv6 literal
        end = text.find("]")
        if end < 0:
            raise _bad(shown, "unclosed '[' in an IPv6 host")
        host, rest = text[1:end], text[end + 1 :]
        if not rest.startswith(":"):
            raise _bad(shown, f"host {text!r} has no port")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise _bad(shown, f"host {text!r} has no port (LMCache requires host:port)")
    if not host:
        raise _bad(shown, "the host is empty")
    port = parse_port(port_text)
    if port is None:
        raise _bad(shown, f"port {port_text!r} is not a number from {PORT_RANGE.replace('-', ' to ')}")
    return host, port


def parse_remote_url(url: str) -> RemoteURL:
    """Parse and validate; any problem raises NetworkTargetError (exit 2) naming the accepted forms."""
    text = url.strip()
    shown = redact_url(text)
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        raise _bad(shown, f"scheme must be one of {', '.join(s + '://' for s in SCHEMES)}")
    if "#" in rest:
        raise _bad(shown, "a URL fragment ('#') is not allowed")
    # Query options (redis-py and LMCache accept ?option=value) are kept in ``raw`` as given.
    main, _q, query = rest.partition("?")
    netloc, _slash, path = main.partition("/")
    username: str | None = None
    password: str | None = None
    if "@" in netloc:
        cred, _at, netloc = netloc.rpartition("@")
        user, colon, pw = cred.partition(":")
        username = user or None
        password = pw if colon else None
        if password == "":
            password = None
    if not netloc:
        raise _bad(shown, "no host:port")
    db: int | None = None
    service: str | None = None
    if scheme == "redis-sentinel":
        hosts = tuple(_host_port(h, shown) for h in netloc.split(","))
        service = path.strip("/") or None
    else:
        if "," in netloc:
            raise _bad(shown, f"several hosts are only accepted for redis-sentinel://, not {scheme}://")
        hosts = (_host_port(netloc, shown),)
        if scheme == "lm":
            if path.strip("/") or username or password:
                raise _bad(shown, "lm:// takes only host:port")
        elif path.strip("/"):
            if not path.strip("/").isdigit():
                raise _bad(shown, f"the database must be a number (/0, /1, ...), not /{path}")
            db = int(path.strip("/"))
    return RemoteURL(
        scheme=scheme,
        hosts=hosts,
        username=username,
        password=password,
        db=db,
        service=service,
        query=query,
        raw=text,
    )


def _as_remote(value: object) -> RemoteURL | None:
    if value is None or isinstance(value, RemoteURL):
        return value
    if isinstance(value, str):
        return parse_remote_url(value) if value.strip() else None
    raise TypeError(f"a remote URL is text or a RemoteURL, not {type(value).__name__}")


# A model field holding a remote URL parsed once: given as text, it is parsed when the model is built
# (a malformed one raises NetworkTargetError); given parsed, it is kept as it is.
ParsedRemote = Annotated[RemoteURL | None, PlainValidator(_as_remote)]


class HoldsRemote(BaseModel):
    """A model that carries a remote URL (launch and export options): built with ``remote`` (parsed
    already) or ``remote_url`` (text, parsed here, once); ``remote_url`` reads it back as given."""

    remote: ParsedRemote = Field(default=None, repr=False, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _remote_from_text(cls, data: object) -> object:
        if isinstance(data, dict) and "remote_url" in data:
            data = dict(data)
            text = data.pop("remote_url")
            if data.get("remote") is None:
                data["remote"] = text
        return data

    @property
    def remote_url(self) -> str | None:
        """The remote tier's URL as given, credentials included (never print it)."""
        return self.remote.raw if self.remote is not None else None
