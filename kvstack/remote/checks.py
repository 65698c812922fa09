"""Doctor checks and plan warnings from a remote store's preflight (RemoteInfo)."""

from __future__ import annotations

from kvstack.hardware.snapshot import Check, RemoteInfo
from kvstack.units import fmt_bw, fmt_bytes


def remote_warnings(info: RemoteInfo) -> list[str]:
    """Why this store would misbehave as a KV tier. KV keys carry no TTL, so without a memory cap
    and an allkeys-* eviction policy the server fills up and then refuses writes (or crashes)."""
    if not info.reachable:
        return []
    out: list[str] = []
    if info.maxmemory_bytes == 0:
        out.append(
            f"Redis at {info.url} has maxmemory 0 (no limit): KV keys have no TTL and will fill the "
            "server; set maxmemory (e.g. CONFIG SET maxmemory 64gb)"
        )
    policy = info.maxmemory_policy
    if policy is not None and not policy.startswith("allkeys-"):
        out.append(
            f"Redis at {info.url} evicts with '{policy}', which never evicts KV keys (they have no "
            "TTL): writes fail once it is full; use CONFIG SET maxmemory-policy allkeys-lru"
        )
    if info.maxmemory_bytes is None or policy is None:
        out.append(
            f"the memory limit or eviction policy of {info.url} is unknown (CONFIG and INFO refused): "
            "make sure it has maxmemory set and an allkeys-* policy"
        )
    return out


def remote_checks(info: RemoteInfo) -> list[Check]:
    if not info.reachable:
        return [Check(name="remote", status="fail", message=f"{info.url}: {info.error or 'unreachable'}")]
    latency = f"{info.latency_s * 1e3:.2f} ms" if info.latency_s is not None else "unknown"
    version = f"Redis {info.server_version}" if info.server_version else "server"
    checks = [Check(name="remote", status="ok", message=f"{info.url}: {version}, latency {latency}")]
    if info.read_bw_bytes_per_s is not None:
        checks.append(
            Check(
                name="remote.bandwidth",
                status="ok",
                message=f"read {fmt_bw(info.read_bw_bytes_per_s)}, write {fmt_bw(info.write_bw_bytes_per_s)}",
            )
        )
    elif info.error:
        checks.append(Check(name="remote.bandwidth", status="warn", message=info.error))
    if info.server_version is not None:  # a Redis server: memory limits apply
        limit = "none" if info.maxmemory_bytes == 0 else fmt_bytes(info.maxmemory_bytes)
        warnings = remote_warnings(info)
        checks.append(
            Check(
                name="remote.memory",
                status="warn" if warnings else "ok",
                message="; ".join(warnings)
                if warnings
                else f"maxmemory {limit}, policy {info.maxmemory_policy}",
            )
        )
    return checks


def writer_checks(info: RemoteInfo) -> list[Check]:
    """What KV the tier's writers store: several layouts written at once never read each other's."""
    if info.kv_layouts is None:
        return []
    if not info.kv_layouts:
        return [
            Check(name="remote.writers", status="ok", message="no kvstack writer has recorded its KV here")
        ]
    live = [k for k in info.kv_layouts if k.live_writers]
    lines = [
        f"{k.fingerprint}: {k.summary} ({', '.join(k.live_writers) or 'no live writer'}; last {k.last_seen})"
        for k in info.kv_layouts
    ]
    if len(live) > 1:
        head = (
            f"{len(live)} KV layouts are written at once: each one's keys are its own, none reads another's"
        )
        return [Check(name="remote.writers", status="warn", message="; ".join([head, *lines]))]
    return [Check(name="remote.writers", status="ok", message="; ".join(lines))]
