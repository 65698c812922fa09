"""Which KV connector moves blocks between the GPU and the lower tiers, by engine and --offload."""

from __future__ import annotations

from kvstack.errors import UnsupportedError
from kvstack.planning.schema import Connector, Engine, OffloadChoice

_BY_ENGINE: dict[str, tuple[str, ...]] = {
    "vllm": ("lmcache", "lmcache-mp", "native"),
    # kvstack drives SGLang's offload through HiCache (host pool + file storage backend).
    "sglang": ("hicache",),
}
_REMOTE_CAPABLE = frozenset({"lmcache", "lmcache-mp"})
# Connectors whose DRAM tier does not keep what a lower tier served: LMCache 0.5.6's server frees an
# L2 hit once read (DefaultPrefetchPolicy retains nothing); in-process LMCache writes it back to
# its CPU backend (StorageManager.batched_get), vLLM's native offload and HiCache keep host copies.
_NO_READMIT = frozenset({"lmcache-mp"})


def auto_candidates(engine: Engine, remote_url: str | None) -> tuple[Connector, ...]:
    """The connectors --offload auto may take for ``engine``, in order of preference."""
    ordered = _BY_ENGINE[engine]
    return tuple(c for c in ordered if remote_url is None or c in _REMOTE_CAPABLE)  # type: ignore[misc]


def readmits_lower_hits(connector: str) -> bool:
    """Whether a block served from disk or remote is copied back into the DRAM tier."""
    return connector not in _NO_READMIT


def wanted_connector(engine: Engine, offload: OffloadChoice, remote_url: str | None) -> tuple[Connector, str]:
    """The connector the plan uses if any offload tier survives sizing, and why.

    Raises UnsupportedError for a combination the engine cannot run (e.g. SGLang with native).
    """
    if offload == "none":
        if remote_url:
            raise UnsupportedError(
                "--remote needs an offload connector, but --offload none turns offloading off",
                hint="drop --offload none or drop --remote",
            )
        return "none", "--offload none: the GPU prefix cache only"
    choice: Connector
    if offload == "auto":
        choice = "lmcache" if engine == "vllm" else "hicache"
    elif offload in _BY_ENGINE[engine]:
        choice = offload
    else:
        raise UnsupportedError(
            f"--offload {offload} does not work with {engine}; choose one of: auto, none, "
            + ", ".join(_BY_ENGINE[engine]),
            hint="--engine vllm for lmcache / native"
            if engine == "sglang"
            else "--engine sglang for hicache",
        )
    if remote_url and choice not in _REMOTE_CAPABLE:
        raise UnsupportedError(
            f"a remote store needs LMCache; {choice} has no Redis/LMCache-server backend",
            hint="use --engine vllm --offload lmcache with --remote",
        )
    reasons = {
        "lmcache": "vLLM + LMCache in-process (LMCacheConnectorV1): DRAM, disk and remote tiers together",
        "lmcache-mp": "vLLM + LMCache multi-process server (LMCacheMPConnector), as asked",
        "native": "vLLM native offloading (OffloadingConnector), as asked: DRAM tier in /dev/shm",
        "hicache": "SGLang HiCache: host-memory pool per rank, file storage backend for the disk tier",
    }
    return choice, reasons[choice] + (" (--offload auto)" if offload == "auto" else "")


def install_warnings(engine: Engine, connector: Connector, versions: dict[str, str | None]) -> list[str]:
    """What is missing from the environment the snapshot describes (planning still proceeds)."""
    out: list[str] = []
    if versions.get(engine) is None:
        out.append(
            f"{engine} is not installed in the probed environment: serve needs it (pip install {engine})"
        )
    if connector in ("lmcache", "lmcache-mp") and versions.get("lmcache") is None:
        out.append("LMCache is not installed in the probed environment: pip install lmcache before serving")
    return out
