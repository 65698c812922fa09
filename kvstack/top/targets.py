"""What `kvstack top` watches: servers, LMCache's cache server, the remote store, the disk tier.

Given by flags, or read from a `kvstack serve` run dir: ``launch.json`` (the launch's public
form: base URL, the cache server's URL, the tier directories and adapters) and ``plan.json``
(the tiers, the remote URL with its password masked). A replica run's launch.json lists each
replica's launch. The remote store's password is never written to the run dir, so a store that
needs one is read only when ``--remote`` gives the URL again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from kvstack.clients.client import check_http_url
from kvstack.errors import InputError, PathError
from kvstack.jsonvalue import JsonObject
from kvstack.redact import MASK, redact_url
from kvstack.rundir import LAUNCH_JSON, PLAN_JSON, default_runs_root
from kvstack.top.capacity import MeasuredCapacity, read_capacity, tuned_capacity
from kvstack.userfile import read_json_object


@dataclass(frozen=True)
class Targets:
    servers: tuple[str, ...]  # base URLs, http://host:port
    lmcache: tuple[str, ...] = ()  # LMCache cache servers' HTTP base URLs (one per replica)
    remote: str | None = field(default=None, repr=False)  # with its credentials: never printed
    disk_dir: str | None = None
    tiers: tuple[str, ...] = ()  # offload tiers the run planned: cpu, disk, remote
    adapters: dict[str, str] = field(default_factory=dict)  # tier -> LMCache L2 adapter ("disk" -> "fs")
    run_dir: str | None = None
    notes: tuple[str, ...] = ()  # what could not be used, said once
    capacity: MeasuredCapacity | None = None  # what the live load is set against
    connector: str | None = None  # the run's (plan.json), which picks a compared sweep's layout

    @property
    def remote_shown(self) -> str | None:
        return redact_url(self.remote) if self.remote else None

    def cache_servers_of(self, server: str) -> tuple[str, ...]:
        """The cache server(s) whose counters say which tier served ``server``'s offloaded tokens:
        one shared by all, the one in the same place (replica i uses cache server i), else all."""
        if len(self.lmcache) == len(self.servers) and server in self.servers:
            return (self.lmcache[self.servers.index(server)],)
        return self.lmcache


def normalize_base(url: str, flag: str) -> str:
    """``host:port`` or ``http://host:port[/]`` -> ``http://host:port``; anything else is refused."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    check_http_url(text, flag)
    parts = urlsplit(text)
    base = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
    return base.removesuffix("/metrics")


def latest_run_dir(root: Path) -> Path:
    """The run dir under ``root`` whose launch.json is the newest."""
    try:
        runs = [p for p in root.iterdir() if (p / LAUNCH_JSON).is_file()]
    except OSError as exc:
        raise PathError(
            f"no kvstack serve runs under {root} ({exc.strerror})",
            hint="start one with kvstack serve, or give --url / --run-dir",
        ) from exc
    if not runs:
        raise PathError(
            f"no kvstack serve run under {root} has a {LAUNCH_JSON}",
            hint="start one with kvstack serve, or give --url / --run-dir",
        )
    return max(runs, key=lambda p: ((p / LAUNCH_JSON).stat().st_mtime, p.name))


def _read_json(path: Path) -> JsonObject:
    return read_json_object(path, PathError, "give a kvstack serve --run-dir", what="launch record")


def _launches(doc: JsonObject) -> list[JsonObject]:
    replicas = doc.get("replicas")
    if isinstance(replicas, list):
        return [r for r in replicas if isinstance(r, dict)]
    return [doc]


def from_run_dir(run_dir: Path) -> Targets:
    launch_path = run_dir / LAUNCH_JSON
    if not launch_path.is_file():
        raise PathError(
            f"{run_dir} has no {LAUNCH_JSON}: not a kvstack serve run dir (or the run never started)",
            hint="give the --run-dir of a kvstack serve run, or --url",
        )
    launches = _launches(_read_json(launch_path))
    servers = tuple(dict.fromkeys(str(x["base_url"]) for x in launches if x.get("base_url")))
    if not servers:
        raise PathError(f"{launch_path} names no server URL", hint="give --url")
    first = launches[0]
    lmcache = tuple(
        str(x["cache_server_url"]) for x in launches if x.get("cache_server_url") and x.get("base_url")
    )
    cache_dirs = first.get("cache_dirs") or {}
    adapters = first.get("tier_adapters") or {}
    tiers: tuple[str, ...] = ()
    remote: str | None = None
    notes: list[str] = []
    connector: str | None = None
    plan_path = run_dir / PLAN_JSON
    if plan_path.is_file():
        plan = _read_json(plan_path)
        connector = str(plan["connector"]) if plan.get("connector") else None
        # tiers[0] is the engine's own KV pool (GPU HBM, or host memory on the CPU platform).
        kinds = [t.get("kind") for t in plan.get("tiers", [])[1:] if isinstance(t, dict)]
        tiers = tuple(str(k) for k in kinds if k in ("cpu", "disk", "remote"))
        url = plan.get("remote_url") or next(
            (
                t.get("url")
                for t in plan.get("tiers", [])
                if isinstance(t, dict) and t.get("kind") == "remote"
            ),
            None,
        )
        if isinstance(url, str) and url:
            if MASK in url:
                notes.append(f"the remote store {url} needs its password: give --remote URL to read its INFO")
            else:
                remote = url
    return Targets(
        servers=servers,
        lmcache=lmcache if len(lmcache) == len(servers) else tuple(dict.fromkeys(lmcache)),
        remote=remote,
        disk_dir=str(cache_dirs["disk"]) if isinstance(cache_dirs, dict) and cache_dirs.get("disk") else None,
        tiers=tiers,
        adapters={str(k): str(v) for k, v in adapters.items()} if isinstance(adapters, dict) else {},
        run_dir=str(run_dir),
        notes=tuple(notes),
        capacity=_tuned_capacity(first),
        connector=connector,
    )


def _tuned_capacity(launch: JsonObject) -> MeasuredCapacity | None:
    """A run ``serve --tuned DIR`` started: the capacity that tune measured, if it did."""
    tuned = launch.get("tuned")
    path = tuned.get("path") if isinstance(tuned, dict) else None
    return tuned_capacity(path) if isinstance(path, str) and path else None


def resolve_targets(
    urls: list[str],
    lmcache: list[str],
    remote: str | None,
    run_dir: Path | None,
    disk_dir: Path | None = None,
    runs_root: Path | None = None,
    capacity: str | None = None,
) -> Targets:
    """Flags win over the run dir; without --url the run dir (given, else the latest) is read."""
    if remote is not None:
        from kvstack.remoteurl import parse_remote_url

        parsed = parse_remote_url(remote)  # a malformed URL is an InputError naming the forms
        if not parsed.is_redis:
            raise InputError(
                f"--remote {parsed.redacted()}: kvstack top reads a Redis store's INFO, not lm://",
                hint="give the redis:// URL of the store",
            )
    base = None
    if not urls or run_dir is not None:
        base = from_run_dir(
            run_dir if run_dir is not None else latest_run_dir(runs_root or default_runs_root())
        )
    servers = tuple(normalize_base(u, "--url") for u in urls) if urls else (base.servers if base else ())
    lm = tuple(normalize_base(u, "--lmcache") for u in lmcache) if lmcache else (base.lmcache if base else ())
    notes = base.notes if base and remote is None else ()
    return Targets(
        servers=tuple(dict.fromkeys(servers)),
        lmcache=lm if len(lm) == len(servers) else tuple(dict.fromkeys(lm)),
        remote=remote if remote is not None else (base.remote if base else None),
        disk_dir=str(disk_dir) if disk_dir is not None else (base.disk_dir if base else None),
        # From flags alone the tiers are not known: empty lets the warnings judge by what the
        # cache server exposes (its DRAM and each L2 adapter), the remote store included.
        tiers=base.tiers if base else (),
        adapters=base.adapters if base else {},
        run_dir=base.run_dir if base else None,
        notes=notes,
        capacity=read_capacity(capacity, base.connector if base else None)
        if capacity is not None
        else (base.capacity if base else None),
    )
