"""What a launch is, as the supervisor runs it: processes, files, directories, ports, URLs, and the
options the user chose for it. The renderers (kvstack/engines) produce these; nothing here starts
anything.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kvstack.names import Connector, Launched
from kvstack.redact import MASK, redact_argv, redact_env, redact_text
from kvstack.remoteurl import HoldsRemote
from kvstack.runtime.tier_kv import TierKv


class FileSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str  # absolute
    content: str
    mode: int = 0o600


def masked_files(files: list[FileSpec]) -> list[dict[str, str]]:
    """Secret files as printed: the path and mode, never the content (YAML may re-spell a key,
    so masking the key's literal text inside it is not enough)."""
    return [{"path": f.path, "content": MASK, "mode": oct(f.mode)} for f in files]


class ProcessSpec(BaseModel):
    """One process to start: the engine itself or a helper server (e.g. ``lmcache server``)."""

    model_config = ConfigDict(extra="forbid")

    name: str  # "engine", "lmcache-server", ...
    argv: list[str]
    # The child's environment: the parent's, minus unset_env / unset_env_prefixes, then plus env
    # (in that order, so a variable kvstack sets survives a prefix it clears).
    env: dict[str, str] = Field(default_factory=dict)
    unset_env: list[str] = Field(default_factory=list)  # e.g. an inherited VLLM_API_KEY
    unset_env_prefixes: list[str] = Field(default_factory=list)  # e.g. inherited LMCACHE_*
    ready_url: str | None = None  # GET returns 2xx when ready; None: ready once started
    # Regexes for log lines that mean the process will never become ready (or has stopped
    # serving for good): the supervisor ends a start within seconds of one, quoting it.
    fatal_patterns: list[str] = Field(default_factory=list)
    # A helper the engine cannot outlive (LMCache's server: an engine whose server died hangs
    # every request and never re-registers its KV caches). Its death restarts the whole unit.
    critical: bool = False
    # A helper the server waits for by itself, so both start together and the helper's start
    # overlaps the server's: kvstack launches the server right after it and then waits for the
    # helper's readiness as it would before (LMCache's vLLM adapter waits up to its mq_timeout,
    # 300 s, for the cache server's first answer). Otherwise the server starts once it is ready.
    starts_with_server: bool = False
    # Files holding secrets that the process reads once, at start (SGLang's key file): written
    # (0600) just before each start and removed as soon as it is ready or stopped, so the secret
    # is on disk only while the process starts; printed and recorded with their content masked.
    start_files: list[FileSpec] = Field(default_factory=list)

    def with_command(
        self, *, argv: list[str] | None = None, env: dict[str, str] | None = None
    ) -> ProcessSpec:
        """A shallow copy (unvalidated, as ``model_copy``) run with ``argv`` and/or ``env`` in place
        of this one's; None keeps this one's."""
        out = self.model_copy()
        if argv is not None:
            out.argv = argv
        if env is not None:
            out.env = env
        return out


class LaunchSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engine: Launched  # an engine, or the router launched like one
    connector: Connector
    engine_version: str | None = None
    connector_version: str | None = None
    helpers: list[ProcessSpec] = Field(default_factory=list)  # started first, stopped last
    server: ProcessSpec  # the engine; its ready_url is the health endpoint
    files: list[FileSpec] = Field(default_factory=list)
    private_dirs: list[str] = Field(default_factory=list)  # created 0700 before launch
    # Created 0700 and EMPTIED before launch: state that must not survive a run (e.g. the
    # PROMETHEUS_MULTIPROC_DIR, whose stale files from dead processes would be summed into counters).
    fresh_dirs: list[str] = Field(default_factory=list)
    ports: list[int] = Field(default_factory=list)  # every port the processes bind: server first
    base_url: str  # e.g. http://127.0.0.1:8000
    served_model_name: str
    api_key_set: bool = False
    reset_cache_path: str | None = None  # POST here empties the GPU prefix cache
    metrics_urls: list[str] = Field(default_factory=list)  # engine first, then helpers
    # LMCache's cache server HTTP API (clear L1, list/delete L2 objects, health), when one runs.
    cache_server_url: str | None = None
    # Offload tier kind -> the cache server's L2 adapter that holds it ("disk" -> "fs").
    tier_adapters: dict[str, str] = Field(default_factory=dict)
    cache_dirs: dict[str, str] = Field(default_factory=dict)  # tier kind -> directory
    fingerprint: str = ""
    # What this engine stores on a shared (remote) tier as, compared with the tier's other writers
    # (serving/shared_tier_kv.py); None: no shared tier.
    tier_kv: TierKv | None = None
    notes: list[str] = Field(default_factory=list)
    secrets: list[str] = Field(default_factory=list, exclude=True, repr=False)

    def with_processes(
        self, *, note: str, server: ProcessSpec | None = None, helpers: list[ProcessSpec] | None = None
    ) -> LaunchSpec:
        """A shallow copy (unvalidated, as ``model_copy``) with ``server`` and/or ``helpers`` in place of
        this one's (None keeps this one's), and ``note`` after its notes."""
        out = self.model_copy()
        if server is not None:
            out.server = server
        if helpers is not None:
            out.helpers = helpers
        out.notes = [*self.notes, note]
        return out

    def public(self) -> dict[str, Any]:
        """The dry-run form: argv/env/files exactly as they would run, secrets masked."""

        def proc(p: ProcessSpec) -> dict[str, Any]:
            return {
                "name": p.name,
                "argv": redact_argv(p.argv, self.secrets),
                "env": redact_env(p.env, self.secrets),
                "unset_env": p.unset_env,
                "unset_env_prefixes": p.unset_env_prefixes,
                "ready_url": p.ready_url,
                "fatal_patterns": p.fatal_patterns,
                "critical": p.critical,
                "starts_with_server": p.starts_with_server,
                "start_files": masked_files(p.start_files),
            }

        return {
            "argv": redact_argv(self.server.argv, self.secrets),
            "env": redact_env(self.server.env, self.secrets),
            "unset_env": self.server.unset_env,
            "unset_env_prefixes": self.server.unset_env_prefixes,
            "ready_url": self.server.ready_url,
            "start_files": masked_files(self.server.start_files),
            "files": [
                {"path": f.path, "content": redact_text(f.content, self.secrets), "mode": oct(f.mode)}
                for f in self.files
            ],
            "helpers": [proc(h) for h in self.helpers],
            "private_dirs": self.private_dirs,
            "fresh_dirs": self.fresh_dirs,
            "ports": self.ports,
            "cache_dirs": self.cache_dirs,
            "reset_cache_path": self.reset_cache_path,
            "metrics_urls": self.metrics_urls,
            "cache_server_url": self.cache_server_url,
            "tier_adapters": self.tier_adapters,
            "served_model_name": self.served_model_name,
            "base_url": self.base_url,
            "engine": self.engine,
            "connector": self.connector,
            "engine_version": self.engine_version,
            "connector_version": self.connector_version,
            "fingerprint": self.fingerprint,
            **({"tier_kv": self.tier_kv.model_dump(mode="json")} if self.tier_kv is not None else {}),
            "notes": self.notes,
        }


class ServeOptions(HoldsRemote):
    """What the user chose for this launch beyond the Plan; the remote tier's URL with its
    credentials (``remote``: the Plan holds only the redacted form) as HoldsRemote carries it."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = Field(default=None, repr=False)
    cache_root: str  # absolute; tiers get fingerprinted subdirectories below it
    run_dir: str  # absolute; configs and logs of this run
    python: str  # interpreter that has the engine installed
    extra_args: list[str] = Field(default_factory=list)
    dev_mode: bool = True  # VLLM_SERVER_DEV_MODE=1 so validation can reset the prefix cache
    # The per-run token vLLM's guard requires on every control route (kvstack/clients/control.py).
    control_token: str | None = Field(default=None, repr=False)
    served_model_name: str | None = None
    load_format: str | None = None  # None: "dummy" for a local dir without weights
    lmcache_port: int | None = None  # LMCache MP server; None: port + 1
    lmcache_http_port: int | None = None  # its HTTP API and /metrics; None: port + 2
