"""The candidates tune ranks: each connector that runs on the platform, crossed with its knobs at
values read off the trace (knobs.py says where each knob is in the installed code).

- chunk: multiples of the engine's KV block (LMCache requires it), around LMCache's default 256;
- DRAM and disk sizes: the capacity curve's knee (where the hit ratio stops rising fast: the point
  farthest above the straight line from one block to the unbounded cache, sizes on a log scale;
  never past the 95% point), its 95% point (what `plan --trace` sizes to) and the most the
  hardware allows (``Limits``); a disk tier only larger than the DRAM one (the tiers are
  inclusive: a smaller one below adds nothing);
- a request-level gate: requests whose prompt is shorter than a threshold skip the offload path
  (no lookup, no retrieve: no per-request offload cost, no tier hits; their chunks are still
  stored, after the prefill the TTFT is measured at). Thresholds: the calibration's break-even
  (the offload cost over the recompute a tier token saves: no request shorter can gain) and the
  trace's prompt-length quartiles. On ``lmcache-mp`` it is kvstack's gated connector
  (``kvstack.gate_prompt_tokens``, knobs.py); in-process LMCache's ``min_retrieve_tokens`` is its
  installed gate on tokens to load (``load`` gate).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from kvstack.connectors import SPECS
from kvstack.planning.predict.capacity import CapacityCurve
from kvstack.planning.predict.served_ttft import ServedCosts
from kvstack.planning.predict.trace_sizing import TARGET_FRACTION
from kvstack.tune.knobs import Platform, offloads, runnable
from kvstack.units import fmt_bytes

CHUNKS = (128, 256, 512, 1024)


@dataclass(frozen=True)
class Limits:
    """What the machine and the engine allow, in the plan's terms."""

    platform: Platform
    engine_block_tokens: int
    engine_pool_tokens: int
    bytes_per_token: float  # KV bytes per token, all ranks
    dram_max_bytes: int
    disk_max_bytes: int = 0  # 0: no disk qualifies
    # The engine's scheduler (vLLM's API-server defaults: connectors/engines.py SchedulerDefaults),
    # as the step-level simulator that ranks the candidates takes it (tune/predict.py).
    batched_tokens: int = 2048  # --max-num-batched-tokens
    max_seqs: int = 128  # --max-num-seqs


@dataclass(frozen=True)
class Gate:
    kind: Literal["prompt", "load"]  # prompt: prompt < tokens skips; load: tier tokens < tokens skip
    tokens: int
    why: str = ""


@dataclass(frozen=True)
class Candidate:
    connector: str
    chunk_tokens: int = 0
    dram_bytes: int = 0
    disk_bytes: int = 0
    gate: Gate | None = None
    sizes: str = ""  # where the sizes come from, e.g. "DRAM knee, disk max"
    not_settable: str = ""  # why the installed connector cannot run it as modelled ("": it can)

    @property
    def offloads(self) -> bool:
        return offloads(self.connector)

    @property
    def prompt_gate(self) -> int | None:
        """Its prompt gate's threshold (prompts shorter skip the offload path), if it has one."""
        return self.gate.tokens if self.gate is not None and self.gate.kind == "prompt" else None

    def blocks(self, bytes_per_token: float) -> tuple[int, int]:
        """(DRAM, disk) capacity in chunks, as the simulation takes them (the share of a tier its
        connector keeps filled: LMCache's server holds the middle of its eviction band)."""
        spec = SPECS.get(self.connector)
        eff = spec.sizing.effective if spec is not None else 1.0
        per_chunk = max(1.0, self.chunk_tokens * bytes_per_token)
        return int(self.dram_bytes * eff // per_chunk), int(self.disk_bytes * eff // per_chunk)

    def knobs(self) -> dict[str, float]:
        """The connector's own knob names and values (its spec's ``knob_values``, and its gate)."""
        spec = SPECS.get(self.connector)
        if spec is None:
            return {}
        out = spec.knob_values(self.chunk_tokens, self.dram_bytes, self.disk_bytes)
        if self.gate is not None and self.offloads:
            out[spec.gate] = float(self.gate.tokens)
        return out

    @property
    def label(self) -> str:
        if not self.offloads:
            return self.connector
        parts = [self.connector, f"chunk {self.chunk_tokens}", f"DRAM {fmt_bytes(self.dram_bytes)}"]
        if self.disk_bytes:
            parts.append(f"disk {fmt_bytes(self.disk_bytes)}")
        if self.gate is not None:
            what = "prompt" if self.gate.kind == "prompt" else "load"
            parts.append(f"gate {what} < {self.gate.tokens:,}")
        return ", ".join(parts)


@dataclass(frozen=True)
class CurveSizes:
    knee: int
    p95: int
    max: int
    block_bytes: int = field(default=0)


def knee_blocks(curve: CapacityCurve) -> int:
    """The size (trace blocks) farthest above the chord from one block to the unbounded cache,
    sizes on a log scale (they span orders of magnitude): where the hit ratio stops rising fast."""
    top = curve.blocks_for(1.0)
    if top <= 1 or curve.max_hit_tokens == 0:
        return max(0, top)
    x = np.log(curve.sizes) / np.log(top)
    y = curve.hit_tokens / curve.max_hit_tokens
    return int(curve.sizes[int(np.argmax(y - x))])


def curve_sizes(curve: CapacityCurve, block_bytes: int) -> CurveSizes:
    p95 = curve.blocks_for(TARGET_FRACTION)
    return CurveSizes(
        knee=min(knee_blocks(curve), p95) * block_bytes,  # a curve that saturates late: its 95% point
        p95=p95 * block_bytes,
        max=curve.blocks_for(1.0) * block_bytes,
        block_bytes=block_bytes,
    )


def break_even_tokens(plain: ServedCosts, offload: ServedCosts) -> int | None:
    """Tier tokens a request needs to earn back the offload path's per-request cost: below it no
    request can gain (each such token saves at most a recompute less a fetch). None: no such
    figure (no cost, or a fetch that costs as much as a recompute)."""
    cost = offload.fixed_s - plain.fixed_s
    fetch = offload.fetch_per_token("cpu") or 0.0
    saved = offload.linear_s - fetch
    if cost <= 0 or saved <= 0:
        return None
    return int(np.ceil(cost / saved))


def _sized(values: dict[str, int], cap: int) -> dict[int, str]:
    """Distinct sizes within ``cap`` (each with the names it goes by), smallest first."""
    out: dict[int, list[str]] = {}
    for name, size in values.items():
        size = min(size, cap) if name != "max" else cap
        if size > 0:
            out.setdefault(size, []).append(name)
    return {size: "=".join(names) for size, names in sorted(out.items())}


def candidate_space(
    limits: Limits,
    sizes: CurveSizes,
    lengths: Sequence[int],
    plain: ServedCosts,
    offload: ServedCosts,
) -> list[Candidate]:
    """Every candidate tune ranks on this platform, ``none`` first."""
    out = [Candidate("none")]
    block = limits.engine_block_tokens
    chunks = [c for c in CHUNKS if c % block == 0] or [block]
    drams = _sized({"knee": sizes.knee, "p95": sizes.p95, "max": 0}, limits.dram_max_bytes)
    disks = _sized({"p95": sizes.p95, "max": 0}, limits.disk_max_bytes) if limits.disk_max_bytes else {}
    quartiles = [int(q) for q in np.percentile(np.asarray(lengths), [25, 50, 75])] if len(lengths) else []
    even = break_even_tokens(plain, offload)
    thresholds: dict[int, str] = {}
    if even:
        thresholds[even] = "break-even"
    for name, q in zip(("p25", "p50", "p75"), quartiles, strict=False):
        thresholds.setdefault(q, f"prompt {name}")
    shortest = min(lengths, default=0)
    thresholds = {t: why for t, why in thresholds.items() if t > shortest}  # a gate that gates nothing
    for connector in runnable(limits.platform):
        spec = connector.spec
        if not spec.offloads:
            continue
        # CPU memory only where tune sizes no disk tier for it (vLLM's native offload: its spec).
        disk_tier = spec.tune_disk and "disk" in spec.tiers
        for chunk in [block] if spec.tune_chunk_is_block else chunks:
            for dram, dram_why in drams.items():
                below = {0: ""} | ({d: why for d, why in disks.items() if d > dram} if disk_tier else {})
                for disk, disk_why in below.items():
                    why = f"DRAM {dram_why}" + (f", disk {disk_why}" if disk else "")
                    base = Candidate(connector.name, chunk, dram, disk, None, why)
                    out.append(base)
                    if connector.gate_kind:
                        for tokens, gate_why in sorted(thresholds.items()):
                            out.append(_gated(base, Gate(connector.gate_kind, tokens, gate_why)))
    return out


def _gated(base: Candidate, gate: Gate) -> Candidate:
    return Candidate(base.connector, base.chunk_tokens, base.dram_bytes, base.disk_bytes, gate, base.sizes)
