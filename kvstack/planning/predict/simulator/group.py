"""The running requests that decode, held as one group on the step clock. Pure.

Every running request but the most recently admitted one decodes (engine.py says why), and each
step gives each of them one token. So a member's computed tokens are its offset plus the clock (the
steps run), and what the group asks of a step follows from counts kept as members join and leave:
the blocks it takes are those of the members on a block boundary (counted by offset modulo the
block), the KV its members attend to is the sum of their offsets plus the members times the clock,
and the next member to finish is the top of a heap of the clock at each member's last token. A
member costs work when it joins, leaves or finishes, not each step.
"""

from __future__ import annotations

import heapq

from kvstack.planning.predict.simulator.state import RequestState


class DecodeGroup:
    def __init__(self, block_tokens: int) -> None:
        self.bt = block_tokens
        self.clock = 0  # the steps run
        self.members: dict[int, RequestState] = {}  # by admission number: the running order
        self.phase = [0] * block_tokens  # members by offset modulo the block
        self.offsets = 0  # the members' offsets, summed
        self.ends: list[tuple[int, int, RequestState]] = []  # (clock at its last token, seq, member)

    def __len__(self) -> int:
        return len(self.members)

    def join(self, r: RequestState) -> None:
        """``r`` (its tokens all computed, not done) decodes from the next step on."""
        r.offset = r.computed - self.clock
        self.members[r.seq] = r
        self.phase[r.offset % self.bt] += 1
        self.offsets += r.offset
        heapq.heappush(self.ends, (r.prompt + r.output - 1 - r.offset, r.seq, r))

    def leave(self, r: RequestState) -> None:
        """``r`` leaves, its computed tokens, output and blocks set from the clock."""
        del self.members[r.seq]
        self.phase[r.offset % self.bt] -= 1
        self.offsets -= r.offset
        r.computed = r.offset + self.clock
        r.generated = r.computed - r.prompt + 1
        r.blocks = -(-r.computed // self.bt)

    def last(self) -> RequestState:
        """The most recently admitted member."""
        return self.members[next(reversed(self.members))]

    def on_boundary(self, r: RequestState) -> bool:
        """Whether ``r``'s next token starts a block."""
        return (r.offset + self.clock) % self.bt == 0

    def blocks_needed(self) -> int:
        """The blocks this step's tokens start."""
        return self.phase[-self.clock % self.bt]

    def kv_tokens(self) -> int:
        """The KV tokens this step's members attend to, the new ones included."""
        return self.offsets + len(self.members) * (self.clock + 1)

    def blocks_after(self, k: int) -> int:
        """The blocks the steps after this one start, ``k`` steps in all."""
        cycles, rest = divmod(k - 1, self.bt)
        extra = cycles * len(self.members)
        return extra + sum(self.phase[-(self.clock + j) % self.bt] for j in range(1, rest + 1))

    def steps_to_first_end(self) -> int:
        """Steps until a member's last token, this one counted (the group is not empty)."""
        ends, members = self.ends, self.members
        while members.get(ends[0][1]) is not ends[0][2]:
            heapq.heappop(ends)  # it left since (preempted)
        return ends[0][0] - self.clock

    def advance(self, k: int) -> list[RequestState]:
        """``k`` steps run: the members whose last token came, out of the group, in order."""
        self.clock += k
        done: list[RequestState] = []
        ends, members = self.ends, self.members
        while ends and ends[0][0] <= self.clock:
            _, seq, r = heapq.heappop(ends)
            if members.get(seq) is r:
                self.leave(r)
                done.append(r)
        return done
