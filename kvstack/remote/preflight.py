"""Preflight of a remote KV store: is it there, what is it, how fast, will it fill up.

Failures to reach or authenticate are data (``RemoteInfo(reachable=False, error=...)``) so that
``doctor`` can report them; ``require_reachable`` turns them into an error for ``serve``.
The password never leaves this module: RemoteInfo holds the redacted URL and every error text
is passed through ``redact_text`` with the password as a known secret.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from redis.exceptions import AuthenticationError, RedisError, ResponseError

from kvstack.errors import NetworkTargetError
from kvstack.hardware.snapshot import RemoteInfo
from kvstack.redact import redact_text
from kvstack.remoteurl import RemoteURL, parse_remote_url

log = logging.getLogger(__name__)

KEY_PREFIX = "kvstack:preflight:"
PING_COUNT = 10
AUTH_FAILED = "authentication failed"
CANNOT_CONNECT = "cannot connect"
# LMCache's sentinel connector reads the master's name from this variable, default "redismaster"
# (lmcache 0.5.6 v1/storage_backend/connector/redis_connector.py RedisSentinelConnector).
SENTINEL_SERVICE_ENV = "REDIS_SERVICE_NAME"
SENTINEL_SERVICE_DEFAULT = "redismaster"


def connect(url: RemoteURL, timeout_s: float) -> Any:
    if url.scheme == "redis-sentinel":
        service = url.service or os.environ.get(SENTINEL_SERVICE_ENV, SENTINEL_SERVICE_DEFAULT)
        sentinel = redis.Sentinel(list(url.hosts), socket_timeout=timeout_s)  # type: ignore[no-untyped-call]
        return sentinel.master_for(  # type: ignore[no-untyped-call]
            service, socket_timeout=timeout_s, username=url.username, password=url.password
        )
    return redis.Redis.from_url(
        url.raw, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, decode_responses=False
    )


def _as_str(value: object) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _memory_settings(client: Any) -> tuple[int | None, str | None]:
    """maxmemory and its policy; CONFIG may be renamed/disabled (managed Redis): fall back to INFO."""
    try:
        mm = _as_str(client.config_get("maxmemory").get("maxmemory"))
        pol = _as_str(client.config_get("maxmemory-policy").get("maxmemory-policy"))
        if mm is not None and mm.isdigit():
            return int(mm), pol
    except ResponseError as exc:
        log.debug("CONFIG GET refused (%s); reading INFO memory", type(exc).__name__)
    try:
        mem = client.info("memory")
    except ResponseError:
        return None, None
    raw_mm = mem.get("maxmemory")
    return (int(raw_mm) if isinstance(raw_mm, int) else None), _as_str(mem.get("maxmemory_policy"))


def _bandwidth(client: Any, sample_bytes: int, samples: int) -> tuple[float, float]:
    """(read, write) bytes/s from SET/GET of chunk-sized values under a temporary key."""
    key = f"{KEY_PREFIX}{uuid.uuid4().hex}"
    value = os.urandom(sample_bytes)
    write_s = read_s = 0.0
    try:
        for _ in range(samples):
            t0 = time.perf_counter()
            # The expiry is a backstop: the key is deleted below, but not if we are killed.
            client.set(key, value, px=60_000)
            write_s += time.perf_counter() - t0
        for _ in range(samples):
            t0 = time.perf_counter()
            got = client.get(key)
            read_s += time.perf_counter() - t0
            if got is None or len(got) != sample_bytes:
                raise ResponseError("the value read back differs from the one written")
    finally:
        try:
            client.delete(key)
        except RedisError as exc:
            log.debug("could not delete %s: %s", key, type(exc).__name__)
    total = float(sample_bytes * samples)
    return total / max(read_s, 1e-9), total / max(write_s, 1e-9)


def _tcp_latency(url: RemoteURL, timeout_s: float) -> float:
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        with socket.create_connection((url.host, url.port), timeout=timeout_s):
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _preflight_lm(url: RemoteURL, timeout_s: float) -> RemoteInfo:
    # LMCache's lm:// server speaks its own protocol: only reachability and connect time are known.
    try:
        latency = _tcp_latency(url, timeout_s)
    except OSError as exc:
        return RemoteInfo(
            url=url.redacted(), reachable=False, error=f"{CANNOT_CONNECT}: {exc.strerror or exc}"
        )
    return RemoteInfo(url=url.redacted(), reachable=True, latency_s=latency)


def _failure(exc: BaseException, clean: Callable[[BaseException], str]) -> str:
    """Why a command to the store failed: a refused login, a refused command, or no connection."""
    if isinstance(exc, AuthenticationError):
        return f"{AUTH_FAILED}: {clean(exc)}"
    if isinstance(exc, ResponseError):
        text = clean(exc)
        kind = AUTH_FAILED if text.upper().startswith(("NOAUTH", "WRONGPASS")) else "refused"
        return f"{kind}: {text}"
    return f"{CANNOT_CONNECT}: {clean(exc)}"


def _cleaner(parsed: RemoteURL) -> Callable[[BaseException], str]:
    def clean(exc: BaseException) -> str:
        return redact_text(str(exc) or type(exc).__name__, parsed.secrets)

    return clean


def parsed_url(url: RemoteURL | str) -> RemoteURL:
    """``url`` as parsed where it entered kvstack, or parsed now (text: a malformed one raises
    NetworkTargetError naming the accepted forms)."""
    return url if isinstance(url, RemoteURL) else parse_remote_url(url)


def ping(url: RemoteURL | str, timeout_s: float = 2.0) -> RemoteInfo:
    """Is the store there right now? One round trip, for checks repeated while serving."""
    parsed = parsed_url(url)
    if parsed.scheme == "lm":
        return _preflight_lm(parsed, timeout_s)
    client = connect(parsed, timeout_s)
    try:
        client.ping()
        keys = int(client.dbsize())
    except (RedisError, OSError) as exc:
        return RemoteInfo(url=parsed.redacted(), reachable=False, error=_failure(exc, _cleaner(parsed)))
    finally:
        with contextlib.suppress(RedisError):
            client.close()
    return RemoteInfo(url=parsed.redacted(), reachable=True, keys=keys)


def preflight(
    url: RemoteURL | str, timeout_s: float = 3.0, sample_bytes: int = 1 << 20, samples: int = 8
) -> RemoteInfo:
    """PING, version, maxmemory/policy, median PING latency and a SET/GET bandwidth estimate.

    A malformed URL raises NetworkTargetError; an unreachable store or a refused login is
    returned as ``reachable=False`` with the reason.
    """
    parsed = parsed_url(url)
    shown = parsed.redacted()
    if parsed.scheme == "lm":
        return _preflight_lm(parsed, timeout_s)
    clean = _cleaner(parsed)
    log.debug("preflight of %s", shown)
    client = connect(parsed, timeout_s)
    try:
        try:
            client.ping()
            pings = []
            for _ in range(PING_COUNT):
                t0 = time.perf_counter()
                client.ping()
                pings.append(time.perf_counter() - t0)
            version = _as_str(client.info("server").get("redis_version"))
        except (RedisError, OSError) as exc:
            return RemoteInfo(url=shown, reachable=False, error=_failure(exc, clean))
        info = RemoteInfo(url=shown, reachable=True, server_version=version)
        info.latency_s = statistics.median(pings)
        try:
            info.maxmemory_bytes, info.maxmemory_policy = _memory_settings(client)
            info.read_bw_bytes_per_s, info.write_bw_bytes_per_s = _bandwidth(client, sample_bytes, samples)
        except RedisError as exc:
            # Reachable but a probe failed (e.g. OOM under noeviction, a read-only replica).
            info.error = f"bandwidth probe failed: {clean(exc)}"
        return info
    finally:
        with contextlib.suppress(RedisError):
            client.close()


def require_reachable(url: RemoteURL | str, timeout_s: float = 3.0) -> RemoteInfo:
    """preflight, raising NetworkTargetError with a hint when the store cannot be used."""
    parsed = parsed_url(url)
    info = preflight(parsed, timeout_s=timeout_s)
    if info.reachable:
        return info
    error = info.error or "no answer"
    if error.startswith(AUTH_FAILED):
        hint = "check the user name and password in the URL: redis://USER:PASSWORD@host:port"
    elif parsed.scheme == "lm":
        hint = f"start the LMCache server on {parsed.host}:{parsed.port} or fix host:port"
    else:
        hint = (
            f"start Redis on {parsed.host}:{parsed.port} or fix host:port; "
            f"test with: redis-cli -h {parsed.host} -p {parsed.port} ping"
        )
    raise NetworkTargetError(f"remote store {info.url} is unusable: {error}", hint=hint)


def store_info(
    url: RemoteURL | str, timeout_s: float = 2.0
) -> tuple[dict[str, object] | None, int | None, str | None]:
    """One INFO and DBSIZE of a Redis store: ``(info, keys, None)`` or ``(None, None, why)``.

    For monitors (``kvstack top``): the reason is redacted like every error of this module, and a
    malformed URL raises NetworkTargetError.
    """
    parsed = parsed_url(url)
    if not parsed.is_redis:
        return None, None, f"{parsed.scheme}:// has no INFO"
    client = connect(parsed, timeout_s)
    try:
        info = dict(client.info())
        keys = int(client.dbsize())
    except (RedisError, OSError) as exc:
        return None, None, _failure(exc, _cleaner(parsed))
    finally:
        with contextlib.suppress(RedisError):
            client.close()
    return info, keys, None
