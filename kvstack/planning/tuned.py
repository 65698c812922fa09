"""A layout `kvstack tune` chose, as a plan input: the connector, its chunk and its tier sizes. Pure.

`tune` writes it (tuned.json in its --out DIR); `serve --tuned DIR`, `export --tuned DIR` and `plan
--tuned DIR` read it into ``PlanRequest.tuned``, and ``make_plan`` plans that connector and then
sets the chunk, the sizes and the per-request gate tune chose (``apply_tuned``), saying so in the
plan's reasons. A layout tune modelled but the installed connector cannot set is recorded, not
applied.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kvstack.connectors import spec_of
from kvstack.planning.schema import GATED_CONNECTOR, Connector, Plan, Tier
from kvstack.units import fmt_bytes

TUNED_JSON = "tuned.json"


class TunedLayout(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["kvstack-tuned"] = "kvstack-tuned"
    connector: Connector
    chunk_tokens: int = Field(default=0, ge=0)
    dram_bytes: int = Field(default=0, ge=0)
    disk_bytes: int = Field(default=0, ge=0)
    knobs: dict[str, float] = Field(default_factory=dict)  # the connector's own names and values
    gate_tokens: int | None = None  # prompts shorter than this skip the offload path (lmcache-mp)
    not_settable: str = ""  # why the installed connector cannot serve it as modelled ("": it can)
    objective: str = "p50"
    predicted: dict[str, float] = Field(default_factory=dict)  # p50_s, p90_s, mean_s
    source: str = ""  # which tune chose it: trace, calibration, candidates
    # "measured": the winner of tune's replays (``measured`` holds its figures and their noise);
    # "predicted": the ranking model's best, not replayed (tune --budget 0).
    chosen_by: Literal["predicted", "measured"] = "predicted"
    measured: dict[str, float] = Field(default_factory=dict)
    created: str = ""  # when tune wrote it (ISO 8601, UTC)

    @property
    def label(self) -> str:
        if not spec_of(self.connector).offloads:
            return "none"
        disk = f", disk {fmt_bytes(self.disk_bytes)}" if self.disk_bytes else ""
        gate = f", gate prompt < {self.gate_tokens:,}" if self.gate_tokens else ""
        return f"{self.connector}, chunk {self.chunk_tokens}, DRAM {fmt_bytes(self.dram_bytes)}{disk}{gate}"

    def record(self, path: str) -> dict[str, str]:
        """What a run dir's launch.json says of the tune that chose its layout (``path``: the
        tuned.json it was read from)."""
        return {
            "path": path,
            "created": self.created,
            "winner": self.label,
            "chosen_by": self.chosen_by,
            "objective": self.objective,
        }


def _resized(tier: Tier, size: int, why: str) -> Tier:
    tokens = int(size * tier.tokens / tier.size_bytes) if tier.size_bytes else 0
    per_rank = int(size * tier.size_bytes_per_rank / tier.size_bytes) if tier.size_bytes else size
    return tier.resized(size_bytes=size, size_bytes_per_rank=per_rank, tokens=tokens, reason=why)


def apply_tuned(plan: Plan, tuned: TunedLayout) -> Plan:
    """``plan`` (planned with --offload ``tuned.connector``) with tune's chunk and tier sizes."""
    reasons = {**plan.reasons, "tuned": f"{tuned.label}: chosen by kvstack tune ({tuned.source})"}
    warnings = list(plan.warnings)
    if plan.transfer.connector != tuned.connector:
        warnings.append(
            f"the tuned layout's connector {tuned.connector} could not be planned on this machine "
            f"(connector: {plan.reasons.get('connector', plan.transfer.connector)}): "
            f"the plan keeps {plan.transfer.connector}"
        )
        return plan.with_notes(reasons=reasons, warnings=warnings)
    if not spec_of(tuned.connector).offloads:
        return plan.with_notes(reasons=reasons)
    why = f"kvstack tune ({tuned.objective}: predicted p50 {tuned.predicted.get('p50_s', 0) * 1000:.1f} ms)"
    tiers = [plan.cache.tiers[0]]
    seen_disk = False
    for tier in plan.offload_tiers:
        if tier.kind == "cpu":
            tiers.append(_resized(tier, tuned.dram_bytes, f"{fmt_bytes(tuned.dram_bytes)} from {why}"))
        elif tier.kind == "disk":
            seen_disk = True
            if tuned.disk_bytes:
                tiers.append(_resized(tier, tuned.disk_bytes, f"{fmt_bytes(tuned.disk_bytes)} from {why}"))
            else:
                reasons["disk_tier"] = f"off: {why} chose none"
        else:
            tiers.append(tier)
    if tuned.disk_bytes and not seen_disk:
        warnings.append(
            f"the tuned layout has a {fmt_bytes(tuned.disk_bytes)} disk tier, but no disk qualifies on this "
            "machine: planned without it"
        )
    gate: int | None = None
    if tuned.not_settable:
        warnings.append(f"tune modelled {tuned.label}, not served as modelled: {tuned.not_settable}")
    elif tuned.gate_tokens:
        if spec_of(tuned.connector).gate_kind == "prompt":
            gate = tuned.gate_tokens
            reasons["gate"] = f"prompts shorter than {gate:,} tokens skip the offload lookup and load: {why}"
        else:
            warnings.append(
                f"the tuned layout gates prompts shorter than {tuned.gate_tokens:,} tokens, which only "
                f"{GATED_CONNECTOR} can: planned without the gate"
            )
    reasons["chunk_size"] = f"{tuned.chunk_tokens} tokens from {why}"
    out = plan.with_tiers(tiers)  # its cache group is its own copy; its transfer group is copied here
    out.cache.chunk_size = tuned.chunk_tokens
    out.transfer = out.transfer.model_copy()
    out.transfer.gate_prompt_tokens = gate
    out.reasons, out.warnings = reasons, warnings
    return out
