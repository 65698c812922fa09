"""Who writes a shared KV tier, and as what KV (runtime/tier_kv.py): records kvstack keeps on the
Redis tier beside LMCache's keys, so that a new writer whose KV would not match is refused.

- ``kvstack:tier:writer:<instance>``: one per engine kvstack serves on the tier (its TierKv, where it
  runs). It expires TTL_S after its last refresh; serving refreshes it every REFRESH_S and deletes it
  when it stops, so only live writers are compared.
- ``kvstack:tier:kv:<fingerprint>``: every TierKv that ever wrote there, first and last seen, kept:
  what KV the tier holds (``kvstack doctor --remote``), live or not.
- Two indexes name them, so that reading never walks the keyspace (a shared tier holds millions of
  LMCache's keys, and ``kvstack top`` reads the records at every refresh): ``kvstack:tier:writers``,
  a sorted set of writer instances scored by when their record expires (the store's clock; entries
  past it are dropped when a writer registers), and ``kvstack:tier:kvs``, the set of fingerprints.
  A record no index names is not read; an index entry whose record is gone is skipped.

Every failure to reach the store is a ``TierRecordsError`` whose text holds no password.
"""

from __future__ import annotations

import contextlib
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ValidationError
from redis.exceptions import RedisError, ResponseError

from kvstack import __version__
from kvstack.errors import KvstackError
from kvstack.hardware.snapshot import RemoteKvLayout
from kvstack.redact import redact_text
from kvstack.remote.preflight import connect, parsed_url
from kvstack.remoteurl import RemoteURL
from kvstack.runtime.tier_kv import TierKv

WRITER_PREFIX = "kvstack:tier:writer:"
KV_PREFIX = "kvstack:tier:kv:"
WRITERS_INDEX = "kvstack:tier:writers"  # sorted set: instance -> when its record expires (epoch s)
KVS_INDEX = "kvstack:tier:kvs"  # set: the fingerprints of every KV record
TTL_S = 90
REFRESH_S = 30.0


@dataclass
class Lookups:
    """The store's keyspace lookups kvstack's own reads of the records made, as the store counts them
    in INFO's keyspace_hits/keyspace_misses (a key that exists is a hit; Redis keeps no empty set, so
    an empty index is a missing key): `kvstack top` takes them out of the tier's hit ratio."""

    hits: int = 0
    misses: int = 0


class TierRecordsError(KvstackError):
    """The tier's records could not be read or written (the store's own error, redacted)."""


class TierWriter(BaseModel):
    kv: TierKv
    fingerprint: str
    instance: str  # host:port of the engine
    run_dir: str
    pid: int
    since: float  # epoch seconds
    kvstack_version: str = __version__


class TierKvRecord(BaseModel):
    kv: TierKv
    fingerprint: str
    first_seen: float
    last_seen: float


def instance_name(base_url: str) -> str:
    """``host:port`` of an engine, its host named as other machines know it when it binds loopback."""
    hostport = base_url.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if host in ("127.0.0.1", "localhost", "[::1]", "0.0.0.0"):
        host = socket.gethostname()
    return f"{host}:{port}"


class TierRecords:
    """The records of one store; use as a context manager (one connection)."""

    def __init__(self, url: RemoteURL | str, timeout_s: float = 3.0, lookups: Lookups | None = None) -> None:
        self.parsed = parsed_url(url)
        self.timeout_s = timeout_s
        self.client: Any = None
        self.lookups = lookups if lookups is not None else Lookups()  # what the reads cost the store

    def __enter__(self) -> TierRecords:
        self.client = connect(self.parsed, self.timeout_s)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(RedisError, OSError):
            self.client.close()

    def _fail(self, what: str, exc: BaseException) -> TierRecordsError:
        why = redact_text(str(exc) or type(exc).__name__, self.parsed.secrets)
        return TierRecordsError(
            f"the shared tier's writer records could not be {what} on {self.parsed.redacted()}: {why}"
        )

    def register(self, writer: TierWriter) -> None:
        """Record (or refresh) ``writer`` and the KV it stores."""
        now = time.time()
        kv_key = KV_PREFIX + writer.fingerprint
        try:
            store_now = self._store_time()
            (
                self.client.pipeline()
                .set(WRITER_PREFIX + writer.instance, writer.model_dump_json(), ex=TTL_S)
                .zremrangebyscore(WRITERS_INDEX, "-inf", store_now)  # writers that stopped refreshing
                .zadd(WRITERS_INDEX, {writer.instance: store_now + TTL_S})
                .sadd(KVS_INDEX, writer.fingerprint)
                .execute()
            )
            old = self.client.get(kv_key)
            first = now
            if old is not None:
                with contextlib.suppress(ValidationError, ValueError):
                    first = TierKvRecord.model_validate_json(old).first_seen
            record = TierKvRecord(
                kv=writer.kv, fingerprint=writer.fingerprint, first_seen=first, last_seen=now
            )
            self.client.set(kv_key, record.model_dump_json())
        except (RedisError, OSError) as exc:
            raise self._fail("written", exc) from None

    def _store_time(self) -> float:
        """The store's clock, as the records' TTLs are: no machine's clock decides which writers
        another machine sees (this machine's where TIME is renamed or disabled, as some managed
        stores do)."""
        try:
            seconds, micros = self.client.time()
        except ResponseError:
            return time.time()
        return float(seconds) + float(micros) / 1e6

    def unregister(self, instance: str) -> None:
        try:
            self.client.pipeline().delete(WRITER_PREFIX + instance).zrem(WRITERS_INDEX, instance).execute()
        except (RedisError, OSError) as exc:
            raise self._fail("removed", exc) from None

    def _read(self, prefix: str, names: list[bytes | str]) -> list[bytes]:
        """The records ``prefix`` + each of ``names``; those gone (expired, removed) skipped."""
        keys = sorted(prefix.encode() + (n if isinstance(n, bytes) else n.encode()) for n in names)
        try:
            values = self.client.mget(keys) if keys else []
        except (RedisError, OSError) as exc:
            raise self._fail("read", exc) from None
        found = [v for v in values if v is not None]
        self.lookups.hits += len(found)
        self.lookups.misses += len(values) - len(found)
        return found

    def _index(self, read: Any) -> list[bytes | str]:
        try:
            names = list(read())
        except (RedisError, OSError) as exc:
            raise self._fail("read", exc) from None
        if names:
            self.lookups.hits += 1
        else:
            self.lookups.misses += 1
        return names

    def writers(self) -> list[TierWriter]:
        """The live writers (records not expired: their TTL is the store's), unreadable records skipped."""
        out = []
        for raw in self._read(WRITER_PREFIX, self._index(lambda: self.client.zrange(WRITERS_INDEX, 0, -1))):
            with contextlib.suppress(ValidationError, ValueError):
                out.append(TierWriter.model_validate_json(raw))
        return out

    def kv_records(self) -> list[TierKvRecord]:
        """Every KV layout that wrote to the tier, the most recently seen first."""
        out = []
        for raw in self._read(KV_PREFIX, self._index(lambda: self.client.smembers(KVS_INDEX))):
            with contextlib.suppress(ValidationError, ValueError):
                out.append(TierKvRecord.model_validate_json(raw))
        return sorted(out, key=lambda r: -r.last_seen)


def layouts(
    url: RemoteURL | str, timeout_s: float = 3.0, lookups: Lookups | None = None
) -> list[RemoteKvLayout]:
    """The KV layouts recorded on the tier at ``url``, each with its live writers, newest first
    (``lookups``: counts the store's keyspace lookups the read made)."""
    with TierRecords(url, timeout_s, lookups) as records:
        kept, live = records.kv_records(), records.writers()
    return [
        RemoteKvLayout(
            fingerprint=r.fingerprint,
            summary=r.kv.summary(),
            live_writers=sorted(w.instance for w in live if w.fingerprint == r.fingerprint),
            last_seen=datetime.fromtimestamp(r.last_seen, UTC).isoformat(timespec="seconds"),
        )
        for r in kept
    ]


def recorded_layouts(
    url: RemoteURL | str, timeout_s: float = 3.0, lookups: Lookups | None = None
) -> list[RemoteKvLayout] | None:
    """``layouts``, or None when the records cannot be read (the store's own check says why)."""
    try:
        return layouts(url, timeout_s, lookups)
    except TierRecordsError:
        return None
