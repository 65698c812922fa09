"""A request's state as the simulated engine serves it, and the keys of its blocks. Pure.

A block of its prompt is keyed by the prefix it ends (inputs.py ``unit_keys``); its blocks past the
prompt's whole ones (its prompt's partial tail, then its output) are keyed as its own,
``-(1 + index x 2^32 + block)``: no other request shares them, and it finds them again when it is
preempted and comes back.
"""

from __future__ import annotations

from kvstack.planning.predict.simulator.inputs import SimRequest, unit_keys

_OWN = 1 << 32


class RequestState:
    __slots__ = (
        "admitted",
        "arrival_s",
        "blocks",
        "computed",
        "finish_s",
        "first_s",
        "gated",
        "generated",
        "held",
        "index",
        "keys",
        "offset",
        "output",
        "pool_hit",
        "preemptions",
        "prompt",
        "recompute_again",
        "recomputed",
        "registered",
        "seq",
        "spec",
        "stored",
        "tier_hit",
    )

    def __init__(self, index: int, spec: SimRequest, tiers: int) -> None:
        self.index, self.spec = index, spec
        self.arrival_s, self.prompt, self.output = spec.arrival_s, spec.prompt_tokens, spec.output_tokens
        self.keys: list[int] | None = None  # the prompt's whole blocks' keys, while it is in play
        # Tokens with their KV computed, tokens sampled, blocks held, blocks cached, chunks stored.
        # While it decodes in the group, the first three follow the step clock (group.py) instead.
        self.computed = self.generated = self.blocks = self.registered = self.stored = 0
        self.offset = 0  # in the group: computed tokens minus the step clock
        self.seq = -1  # its admission's number (the running order), -1 while not running
        self.held: list[int] = []  # its cached blocks' keys, in block order
        self.first_s: float | None = None
        self.finish_s: float | None = None
        self.admitted = False
        self.gated = False  # the layout's gate kept it off the offload path (at its first admission)
        # As found at its first admission: prompt tokens from the pool, from each tier, computed.
        self.pool_hit = self.recomputed = 0
        self.tier_hit = [0] * tiers
        self.preemptions = self.recompute_again = 0  # tokens computed again after preemptions

    def prompt_keys(self, block_tokens: int) -> list[int]:
        if self.keys is None:
            self.keys = unit_keys(self.spec.prefix_ids, self.spec.id_tokens, block_tokens, self.prompt)
        return self.keys

    def own_key(self, block: int) -> int:
        return -(1 + self.index * _OWN + block)

    def block_keys(self, block_tokens: int, blocks: int) -> list[int]:
        """The keys of its first ``blocks`` blocks."""
        keys = self.prompt_keys(block_tokens)
        if blocks <= len(keys):
            return keys[:blocks]
        return keys + [self.own_key(b) for b in range(len(keys), blocks)]
