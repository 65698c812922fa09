"""The canary's probes: nonce-led prompts planted in the caches, asked again once traffic moved them.

A probe is a validation prompt (validation/prompts.py: a nonce first, so no user prompt shares a
block of it; a repeated passage of random numbers, so a wrong KV moves the answer at most
positions). Planting it stores its KV wherever the layout stores KV (write-through tiers keep it
in every tier); the user's traffic then pushes it out of the engine's cache, then out of DRAM.

Which probe is asked again: one planted at least an interval ago and before the previous check was
asked, alternately the youngest (most likely still in DRAM) and the oldest (most likely only on disk
or in the remote store), so that wrong KV in any tier meets a probe it held within two checks. A
probe asked again is retired: its KV is fresh again everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvstack.validation.prompts import Prompt

DEFAULT_POOL = 8


@dataclass(frozen=True)
class Probe:
    prompt: Prompt
    planted_at: float  # monotonic seconds

    @property
    def name(self) -> str:
        return self.prompt.nonce


class ProbePool:
    """The planted probes, oldest first."""

    def __init__(self, size: int = DEFAULT_POOL) -> None:
        self.size = max(2, size)
        self.probes: list[Probe] = []
        self.turn = 0

    def __len__(self) -> int:
        return len(self.probes)

    def add(self, probe: Probe) -> None:
        self.probes.append(probe)
        while len(self.probes) > self.size:
            del self.probes[len(self.probes) // 2]  # keep the oldest and the youngest

    def take(self, now: float, min_age_s: float, planted_before: float | None = None) -> Probe | None:
        """The probe to ask again now (removed from the pool), or None when none is old enough.

        ``planted_before``: when the previous check was asked. Only probes planted before it are
        asked, so that the first two checks after a tier went wrong both ask probes it held then,
        however long a check takes next to the interval."""
        ready = [
            p
            for p in self.probes
            if now - p.planted_at >= min_age_s and (planted_before is None or p.planted_at <= planted_before)
        ]
        if not ready:
            return None
        pick = ready[-1] if self.turn % 2 == 0 else ready[0]
        self.turn += 1
        self.probes.remove(pick)
        return pick
