"""The served engine, step by step: vLLM v1's scheduler over the pool and the offload tiers. Pure.

Each step (``Scheduler.schedule``), with a budget of ``max_num_batched_tokens`` tokens:

1. the running requests, in the order they were admitted: a decoding one gets 1 token, one in the
   middle of its prompt the rest of it, up to the budget left; when the pool cannot hold the blocks
   a request needs, the most recently admitted running request is preempted (its blocks freed, its
   progress lost: recompute preemption) and put back at the front of the waiting queue, until the
   request fits or is itself the one preempted;
2. unless a request was preempted, the waiting requests first come first served while the budget
   lasts and fewer than ``max_num_seqs`` run: a request's prefix is looked up in the pool (its
   leading whole blocks held there, running or free), then in the tiers from the chunk the pool
   stopped in (each chunk from the first tier holding it; the run stops at the first chunk none
   holds; a layout's gate may keep it off the tiers: inputs.py ``Layout``); at least its last token
   is computed; the rest, up to the budget (all of it or none when
   prefill is not chunked), is its first chunk; it waits, and every request behind it, when the
   pool cannot hold its blocks.

The step lasts ``request_s`` per request admitted with tiers (the offload path's lookup, at
scheduling, before the step) + ``fixed_s`` + its prefill chunks + its decoding sequences (inputs.py's
equations) + the tiers' loads (each admitted request's hits, at its tier's latency and bandwidth)
and stores (every whole prompt chunk computed in it, to each tier not holding it), the overlapped
tiers' transfers running beside the rest: ``request_s + max(the rest, each overlapped tier's
transfers)``. Where the connector makes a request wait for its own load (``TierSpec.load_waits``:
vLLM's WAITING_FOR_REMOTE_KVS, lmcache-mp and native offload), the load is not in any step: it runs
after the lookup on the tier's link (one load at a time), the engine's steps go on without the
request, and it computes the rest of its prompt from the first step after its load is done, before
any waiting request is admitted; a step that only looks up such loads runs no forward pass. At
its end the blocks it filled are cached in the pool, its chunks stored, and each request whose
tokens are all computed samples one token: the first (its TTFT), or one more, and is done after
its last (its blocks freed). Each step's time is charged to what spent it (SimResult
``busy_by``: prefill, decode, the step's fixed and per-request cost, each tier's transfers).

Requests arrive round by round (bench's rounds, a round's start the end of the one before): on
their own clock (an open loop), or sent by a number of clients, each its next request when its last
is done (a closed loop, bench's ``--concurrency``). Each reaches the scheduler ``Layout.outside_s``
after it is sent (HTTP, tokenization), in its TTFT, not in the engine's busy time.

How it stays fast (none of it changes a result):

- Only the most recently admitted running request can be in the middle of its prompt: a prompt is
  cut short only where the budget runs out, and then nothing is admitted after it. Every other
  running request decodes, one token a step (vLLM requires ``max_num_batched_tokens >=
  max_num_seqs``), so they are held as one group on the step clock: a member's computed tokens are
  its offset plus the clock, the blocks the group needs next step are those of the members on a
  block boundary (counted by offset modulo the block), and completions come off a heap. A step
  costs the requests it admits, completes or preempts, not every running one.
- Time with nothing to run is skipped to the next arrival, and a run of identical steps (the group
  alone, no request admitted nor able to be until the next arrival, completion or full pool) is
  taken in one go, its durations summed in closed form (``fast_forward=False`` takes them one by one).
- A member's blocks past its prompt are cached (keyed as its own) when it frees them: no other
  request can hit them, and it looks them up only after freeing them (preempted).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from kvstack.planning.predict.simulator.caches import BlockPool, ChunkTier
from kvstack.planning.predict.simulator.group import DecodeGroup
from kvstack.planning.predict.simulator.inputs import Layout, SimRequest
from kvstack.planning.predict.simulator.results import RequestResult, SimResult
from kvstack.planning.predict.simulator.state import RequestState


@dataclass
class _Lookup:
    blocks: int  # leading blocks the pool holds
    freed: list[int]  # those of them that are free (taking them uses pool room)
    reach: int  # tokens held: the pool's, then the tiers'
    tier_tokens: list[int]
    found: list[tuple[int, int]]  # (chunk key, tier index) of each chunk the tiers serve
    held_to: int  # where what the caches hold ends (reach before the last token is taken back)
    gated: bool = False  # the layout's gate kept it off the offload path


@dataclass
class _Step:
    items: list[tuple[RequestState, int]] = field(default_factory=list)  # prefill: (request, tokens computed)
    compute_s: float = 0.0
    blocking_s: float = 0.0
    overlapped_s: list[float] = field(default_factory=list)  # per tier
    # Its time by what spends it (SimResult.busy_by): compute's parts and each tier's transfers.
    prefill_s: float = 0.0
    decode_s: float = 0.0
    request_s: float = 0.0
    tier_s: list[float] = field(default_factory=list)  # per tier, blocking or overlapped
    stores: list[int] = field(default_factory=list)  # chunk keys, stored to every tier at its end
    decodes: int = 0  # the group's members this step
    loads: int = 0  # requests whose loads it started beside the steps (their lookups paid in it)
    resumed: int = 0  # requests computing in it whose loads were done (``_resume``)
    preempted: bool = False
    blocked: str = ""  # why no (more) waiting request was admitted: empty, seqs, budget, pool
    head_free: set[int] = field(default_factory=set)  # a pool-blocked head's free hits

    @property
    def seconds(self) -> float:
        # The offload path's per-request cost (its lookup, at scheduling) comes before the step and
        # the transfers it starts; the overlapped transfers run beside the step's compute.
        return self.request_s + max(self.compute_s + self.blocking_s, max(self.overlapped_s, default=0.0))

    @property
    def forward(self) -> bool:
        """Whether a forward step runs (a step whose only request waits for its load runs none)."""
        return self.decodes > 0 or any(n > 0 for _, n in self.items)


def simulate(
    requests: Sequence[SimRequest],
    layout: Layout,
    *,
    fast_forward: bool = True,
    clients: int | None = None,
) -> SimResult:
    """Serve ``requests`` on ``layout``, from empty caches, round by round (``SimRequest.round``):
    an open loop, each request arriving at its ``arrival_s`` (from its round's start: the last of
    the round before finished, round 0's at 0), or, with ``clients``, a closed loop: that many
    clients, each sending its round's next request (by arrival, then position) when its previous
    one finished (or was rejected), as bench's ``--concurrency`` workers do."""
    if len({r.id_tokens for r in requests}) > 1:
        raise ValueError("a workload's prefix ids must all cover the same number of tokens")
    if clients is not None and clients < 1:
        raise ValueError("a closed loop needs at least one client")
    return _Engine(requests, layout, fast_forward, clients).run()


def steps_before(gap_s: float, first_s: float, growth_s: float) -> int:
    """How many of the steps starting now, lasting ``first_s``, ``first_s + growth_s``, ..., start
    less than ``gap_s`` from now (at least this one)."""

    def start(j: int) -> float:
        return first_s * j + growth_s * j * (j - 1) / 2

    if first_s <= 0 and growth_s <= 0:
        return 1 << 62
    if growth_s == 0:
        j = math.ceil(gap_s / first_s)
    else:
        half = first_s - growth_s / 2
        j = math.ceil((-half + math.sqrt(half * half + 2 * growth_s * gap_s)) / growth_s)
    j = max(j, 1)
    while j > 1 and start(j - 1) >= gap_s:
        j -= 1
    while start(j) < gap_s:
        j += 1
    return j


class _Engine:
    def __init__(
        self, requests: Sequence[SimRequest], layout: Layout, fast_forward: bool, clients: int | None
    ) -> None:
        self.layout, self.costs, self.limits = layout, layout.costs, layout.limits
        self.bt = layout.limits.block_tokens
        self.chunk = layout.chunk_tokens
        self.per_chunk = self.chunk // self.bt if self.chunk else 0
        self.fast_forward = fast_forward
        self.pool = BlockPool(layout.limits.pool_blocks)
        self.tiers = [ChunkTier(t.capacity_chunks) for t in layout.tiers]
        order = sorted(range(len(requests)), key=lambda i: (requests[i].round, requests[i].arrival_s, i))
        # Each round's requests, in the order sent; released round by round (``_send``).
        self.rounds: deque[deque[RequestState]] = deque()
        for i in order:
            if not self.rounds or self.rounds[-1][0].spec.round != requests[i].round:
                self.rounds.append(deque())
            self.rounds[-1].append(RequestState(i, requests[i], len(self.tiers)))
        self.clients = clients
        self.outside = layout.outside_s  # each request's time before the scheduler sees it
        self.out = 0  # requests of the current round released and not yet done
        self.arrivals: list[RequestState] = []  # released, by arrival
        self.busy_by: dict[str, float] = {"prefill": 0.0, "decode": 0.0, "step": 0.0}
        self.busy_by.update((t.kind, 0.0) for t in layout.tiers)
        self._send(0.0)
        self.done: list[RequestState] = []
        self.waiting: deque[RequestState] = deque()
        # Running: the decoding group (admission order) and at most one request mid-prompt, last.
        self.group = DecodeGroup(self.bt)
        self.tail: RequestState | None = None
        self.seqs = 0
        # Admitted requests loading beside the steps, by when their loads are done, then those done
        # and not yet computing; each tier's link busy until (``_load_aside``).
        self.loading: list[tuple[float, int, RequestState]] = []
        self.ready: deque[RequestState] = deque()
        self.link_free = [0.0] * len(self.tiers)
        self.next = 0
        self.t = self.start = self.arrivals[0].arrival_s if self.arrivals else 0.0
        self.busy = 0.0

    def _send(self, now: float) -> None:
        """Send what the current round may: all of it at its start (an open loop), else a request
        a free client; a round done, the next starts ``now``."""
        rounds = self.rounds
        if self.out == 0:
            while rounds and not rounds[0]:
                rounds.popleft()
        if not rounds:
            return
        pending = rounds[0]
        if self.clients is None:
            if self.out:
                return
            start = now if self.arrivals else 0.0
            while pending:
                r = pending.popleft()
                r.arrival_s = start + r.spec.arrival_s + self.outside  # when the scheduler sees it
                self.arrivals.append(r)
                self.out += 1
            return
        while pending and self.out < self.clients:
            r = pending.popleft()
            r.arrival_s = now + self.outside
            self.arrivals.append(r)
            self.out += 1

    def _done(self, r: RequestState) -> None:
        """``r`` finished or was rejected: its client is free."""
        self.done.append(r)
        self.out -= 1
        self._send(self.t)

    # --- the loop ---------------------------------------------------------------------------------

    def run(self) -> SimResult:
        arrivals = self.arrivals
        while True:
            while self.next < len(arrivals) and arrivals[self.next].arrival_s <= self.t:
                self._arrive(arrivals[self.next])
                self.next += 1
            while self.loading and self.loading[0][0] <= self.t:
                self.ready.append(heapq.heappop(self.loading)[2])
            if not self.group and self.tail is None and not self.waiting and not self.ready:
                upcoming = [arrivals[self.next].arrival_s] if self.next < len(arrivals) else []
                upcoming += [self.loading[0][0]] if self.loading else []
                if not upcoming:
                    break
                self.t = max(self.t, min(upcoming))
                continue
            step = self._plan()
            if not step.items and not step.decodes and not step.loads:
                if step.preempted:
                    continue  # an empty schedule runs no step (the first member never is: _fits)
                raise RuntimeError("the simulated scheduler made no progress")  # cannot happen: _fits
            self._apply(step, self._window(step) if self.fast_forward else 1)
        return self._result()

    def _fits(self, r: RequestState) -> bool:
        """Whether the engine could ever serve ``r`` alone: its KV in the pool and, unchunked, its
        tokens (a preempted one's too) in one step."""
        most = r.prompt + r.output - 1
        limits = self.limits
        if -(-most // self.bt) > limits.pool_blocks:
            return False
        return limits.chunked_prefill or most <= limits.max_num_batched_tokens

    def _arrive(self, r: RequestState) -> None:
        if self._fits(r):
            self.waiting.append(r)
        else:
            self._done(r)

    # --- the decoding group -------------------------------------------------------------------------

    def _last_running(self) -> RequestState:
        """The most recently admitted running request (preemption's victim), out of the running."""
        if self.tail is not None:
            r, self.tail = self.tail, None
            return r
        r = self.group.last()
        self.group.leave(r)
        return r

    def _group_step(self, step: _Step) -> None:
        """The group's tokens this step: the blocks its members on a block boundary need, the most
        recently admitted running requests preempted while the pool cannot hold them."""
        pool, group = self.pool, self.group
        need = group.blocks_needed()
        if need <= pool.room:
            pool.allocate(need)
        else:  # request by request, in admission order, as the scheduler does
            for seq in list(group.members):
                r = group.members.get(seq)
                if r is None:
                    break  # preempted as a victim: so is every member after it
                if not group.on_boundary(r):
                    continue
                while pool.room < 1:
                    victim = self._last_running()
                    self._preempt(victim)
                    step.preempted = True
                    if victim is r:
                        break
                else:
                    pool.allocate(1)
                    continue
                break
        n = step.decodes = len(group)
        if n:
            seconds = self.costs.decode_s(n, group.kv_tokens())
            step.compute_s += seconds
            step.decode_s += seconds

    # --- one step's schedule ------------------------------------------------------------------------

    def _plan(self) -> _Step:
        step = _Step(overlapped_s=[0.0] * len(self.tiers), tier_s=[0.0] * len(self.tiers))
        if self.group:
            self._group_step(step)
        budget = self.limits.max_num_batched_tokens - step.decodes
        r = self.tail
        if r is not None and budget > 0:
            n = min(r.prompt + r.generated - r.computed, budget)
            need = -(-(r.computed + n) // self.bt) - r.blocks
            if need > self.pool.room:  # the last running request: it is the one preempted
                self.tail = None
                self._preempt(r)
                step.preempted = True
            else:
                self.pool.allocate(need)
                r.blocks += need
                self._chunk(step, r, n)
                budget -= n
        if not step.preempted:
            budget = self._resume(step, budget)
            self._admit_waiting(step, budget)
        if step.forward:
            step.compute_s += self.costs.fixed_s
        return step

    def _chunk(self, step: _Step, r: RequestState, n: int) -> None:
        """``n`` more of ``r``'s prompt computed this step: their prefill and the chunks they store."""
        step.items.append((r, n))
        self._prefill(step, r.computed, n)
        self._plan_stores(step, r, n)

    def _prefill(self, step: _Step, cached: int, new: int) -> None:
        seconds = self.costs.prefill_s(cached, new)
        step.compute_s += seconds
        step.prefill_s += seconds

    def _admit_waiting(self, step: _Step, budget: int) -> None:
        waiting, limits, pool, bt = self.waiting, self.limits, self.pool, self.bt
        running = len(self.group) + (self.tail is not None) + step.resumed
        step.blocked = "empty" if not waiting else "budget"
        while waiting and budget > 0:
            if running >= limits.max_num_seqs:
                step.blocked = "seqs"
                return
            r = waiting[0]
            look = self._lookup(r)
            left = r.prompt + r.generated - look.reach
            if not limits.chunked_prefill and left > budget:
                step.blocked = "budget"
                return
            waits = self._waits_for_load(look)  # it computes once its load is done: none now
            n = 0 if waits else min(left, budget)
            need = -(-(look.reach + n) // bt) - look.blocks
            if len(look.freed) + need > pool.room:
                step.blocked, step.head_free = "pool", set(look.freed)
                return
            waiting.popleft()
            self._admit(r, look, need, step, waits=waits)
            if waits:
                step.blocked = "empty" if not waiting else "budget"
                continue
            running += 1
            self._chunk(step, r, n)
            budget -= n
            step.blocked = "empty" if not waiting else "budget"

    def _lookup(self, r: RequestState) -> _Lookup:
        tokens = r.prompt + r.generated
        keys = r.prompt_keys(self.bt)
        limit = (tokens - 1) // self.bt  # at least the last token is computed (it gives the logits)
        blocks, freed = 0, list[int]()
        if self.limits.prefix_caching:
            blocks, freed = self.pool.match(keys, limit)
            if blocks == len(keys) < limit:  # a preempted request's own blocks, past its prompt
                own = r.block_keys(self.bt, limit)[len(keys) :]
                more, more_freed = self.pool.match(own, limit - len(keys))
                blocks, freed = blocks + more, freed + more_freed
        reach = blocks * self.bt
        tier_tokens = [0] * len(self.tiers)
        found: list[tuple[int, int]] = []
        if self._prompt_gated(r):
            return _Lookup(blocks, freed, reach, tier_tokens, found, reach, gated=True)
        if self.tiers:
            chunk, per = self.chunk, self.per_chunk
            j, last = reach // chunk, r.prompt // chunk
            while j < last:
                key = keys[(j + 1) * per - 1]
                k = self._tier_of(key)
                if k is None:
                    break
                end = (j + 1) * chunk
                tier_tokens[k] += end - reach
                reach = end
                found.append((key, k))
                j += 1
        held_to = reach
        if reach > tokens - 1:
            tier_tokens[found[-1][1]] -= reach - (tokens - 1)
            reach = tokens - 1
        if 0 < sum(tier_tokens) < self.layout.gate_load_tokens:  # recomputed, the lookup paid
            return _Lookup(blocks, freed, blocks * self.bt, [0] * len(self.tiers), [], held_to, gated=True)
        return _Lookup(blocks, freed, reach, tier_tokens, found, held_to)

    def _waits_for_load(self, look: _Lookup) -> bool:
        """Whether a tier whose request waits for its own load serves part of this prefix."""
        return any(n and spec.load_waits for n, spec in zip(look.tier_tokens, self.layout.tiers, strict=True))

    def _prompt_gated(self, r: RequestState) -> bool:
        """The prompt gate keeps ``r`` off the offload path (no lookup, no load, no request cost)."""
        return bool(self.tiers) and r.prompt < self.layout.gate_prompt_tokens

    def _tier_of(self, key: int) -> int | None:
        """The first tier holding the chunk ``key``."""
        for k, tier in enumerate(self.tiers):
            if key in tier.lru:
                return k
        return None

    def _admit(self, r: RequestState, look: _Lookup, need: int, step: _Step, *, waits: bool = False) -> None:
        pool = self.pool
        hit = r.block_keys(self.bt, look.blocks)
        pool.acquire(hit, look.freed)
        pool.allocate(need)
        r.held, r.blocks, r.registered = hit, look.blocks + need, look.blocks
        r.computed = look.reach
        r.seq = self.seqs
        self.seqs += 1
        self._register(r)
        tiers, specs = self.tiers, self.layout.tiers
        for key, k in look.found:
            for tier in tiers[k:]:
                tier.touch(key)
            if self.layout.readmit:
                for tier in tiers[:k]:
                    tier.put((key,))
        if waits:
            self._load_aside(r, look, step)
        else:
            for k, tokens in enumerate(look.tier_tokens):
                if tokens:
                    self._transfer(step, k, specs[k].load_s(tokens))
        if tiers:
            if not self._prompt_gated(r):
                step.request_s += self.layout.request_s
            r.stored = look.held_to // self.chunk  # chunks held whole are not stored again
        if not r.admitted:
            r.admitted = True
            r.pool_hit, r.tier_hit = look.blocks * self.bt, look.tier_tokens
            r.recomputed = r.prompt - look.reach
            r.gated = look.gated
        else:
            r.recompute_again += r.prompt + r.generated - look.reach

    def _load_aside(self, r: RequestState, look: _Lookup, step: _Step) -> None:
        """``r``'s loads, after its lookup, beside the engine's steps: each tier's link one load at a
        time; ``r`` computes from the first step after the last of them is done (``_resume``)."""
        start = self.t + self.layout.request_s
        ready = start
        for k, tokens in enumerate(look.tier_tokens):
            if tokens:
                seconds = self.layout.tiers[k].load_s(tokens)
                begin = max(start, self.link_free[k])
                self.link_free[k] = ready_k = begin + seconds
                ready = max(ready, ready_k)
                step.tier_s[k] += seconds  # the tier's busy time, not the step's
        heapq.heappush(self.loading, (ready, r.index, r))
        step.loads += 1

    def _resume(self, step: _Step, budget: int) -> int:
        """The requests whose loads are done compute the rest of their prompts, first loaded first,
        each as a newly admitted one (the last of them left mid-prompt: nothing is admitted after
        it); the budget left."""
        ready, pool, bt = self.ready, self.pool, self.bt
        while ready and budget > 0:
            if len(self.group) + (self.tail is not None) + step.resumed >= self.limits.max_num_seqs:
                step.blocked = "seqs"
                return 0
            r = ready[0]
            left = r.prompt + r.generated - r.computed
            n = min(left, budget)
            need = -(-(r.computed + n) // bt) - r.blocks
            if need > pool.room:
                step.blocked = "pool"
                return 0
            ready.popleft()
            pool.allocate(need)
            r.blocks += need
            r.seq = self.seqs
            self.seqs += 1
            self._chunk(step, r, n)
            step.resumed += 1
            budget = budget - n if n == left else 0
        return budget

    def _transfer(self, step: _Step, tier: int, seconds: float, *, store: bool = False) -> None:
        spec = self.layout.tiers[tier]
        step.tier_s[tier] += seconds
        if spec.stores_overlap if store else spec.overlapped:
            step.overlapped_s[tier] += seconds
        else:
            step.blocking_s += seconds

    def _plan_stores(self, step: _Step, r: RequestState, n: int) -> None:
        """The whole prompt chunks this step's tokens of ``r`` complete, and what storing them costs
        each tier (those it does not hold yet)."""
        if not self.tiers:
            return
        chunk, per, keys = self.chunk, self.per_chunk, r.keys
        assert keys is not None
        done = min(r.computed + n, r.prompt) // chunk
        if done <= r.stored:
            return
        new = keys[(r.stored + 1) * per - 1 : done * per : per]
        r.stored = done
        step.stores += new
        for k, tier in enumerate(self.tiers):
            missing = len(new) - len(tier.lru.keys() & new) if tier.capacity > 0 else 0
            if missing:
                self._transfer(step, k, self.layout.tiers[k].store_s(missing * chunk), store=True)

    def _preempt(self, r: RequestState) -> None:
        """``r`` (already out of the running) frees its blocks and waits at the queue's front."""
        self._release(r)
        r.computed = r.registered = 0
        r.seq = -1
        r.preemptions += 1
        self.waiting.appendleft(r)

    def _release(self, r: RequestState) -> None:
        self._register(r)  # its blocks past its prompt, cached as it frees them
        self.pool.release(r.held, r.blocks)
        r.held, r.blocks = [], 0

    def _register(self, r: RequestState) -> None:
        """Cache the blocks ``r`` has filled since the last call."""
        full = r.computed // self.bt
        b = r.registered
        if b >= full:
            return
        r.registered = full
        if not self.limits.prefix_caching:
            return
        keys = r.keys
        assert keys is not None
        top = min(full, len(keys))
        filled = keys[b:top] if b < top else []
        filled += [r.own_key(block) for block in range(max(b, len(keys)), full)]
        r.held += self.pool.register(filled)

    # --- a run of identical steps: the group alone --------------------------------------------------

    def _window(self, step: _Step) -> int:
        """How many steps like ``step`` run before anything changes (1: only this one); allocates
        the blocks the extra ones fill."""
        if (
            step.preempted
            or step.items
            or step.loads
            or not step.decodes
            or self.tail is not None
            or self.ready
        ):
            return 1
        if step.blocked not in ("empty", "seqs", "budget", "pool"):
            return 1
        k_max = self.group.steps_to_first_end()
        growth = self.costs.decode_s_per_kv_token * step.decodes
        if step.blocked == "empty" and self.next < len(self.arrivals):
            gap = self.arrivals[self.next].arrival_s - self.t
            k_max = min(k_max, steps_before(gap, step.seconds, growth))
        if self.loading:  # a load done: its request computes in the next step
            k_max = min(k_max, steps_before(self.loading[0][0] - self.t, step.seconds, growth))
        if k_max <= 1:
            return 1
        pool, extra = self.pool, self.group.blocks_after
        room = pool.room
        if step.blocked == "pool":
            # Reusing a free block the waiting head would hit could let it in: stop before that.
            empty = pool.capacity - pool.used - len(pool.free)
            most = max(0, extra(k_max) - empty)
            room = min(room, empty + pool.oldest_free_among(step.head_free, most))
        k = k_max
        if extra(k) > room:
            lo, hi = 1, k_max  # extra(lo) fits (it is 0), extra(hi) does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if extra(mid) <= room else (lo, mid)
            k = lo
        if k > 1:
            pool.allocate(extra(k))
        return k

    # --- the step's end -----------------------------------------------------------------------------

    def _apply(self, step: _Step, k: int) -> None:
        growth = self.costs.decode_s_per_kv_token * step.decodes
        stretch = growth * k * (k - 1) / 2  # a run of k steps: each decode reads one token more
        seconds = step.seconds * k + stretch
        self.t += seconds
        self.busy += seconds
        by = self.busy_by
        by["prefill"] += step.prefill_s * k
        by["decode"] += step.decode_s * k + stretch
        by["step"] += ((self.costs.fixed_s if step.forward else 0.0) + step.request_s) * k
        for spec, tier_s in zip(self.layout.tiers, step.tier_s, strict=True):
            by[spec.kind] += tier_s * k
        t = self.t
        for r in self.group.advance(k):
            self._finish(r)
        for r, n in step.items:  # prefill chunks (k is 1)
            r.computed += n
            self._register(r)
            if r is self.tail:
                self.tail = None
            if r.computed < r.prompt + r.generated:
                self.tail = r  # the last admitted: the only one left mid-prompt
                continue
            r.generated += 1
            if r.first_s is None:
                r.first_s = t
            if r.generated >= r.output:
                self._finish(r)
            else:
                self.group.join(r)
        if step.stores:
            for tier in self.tiers:
                tier.put(step.stores)

    def _finish(self, r: RequestState) -> None:
        r.finish_s = self.t
        self._release(r)
        r.keys = None
        r.seq = -1
        self._done(r)

    def _result(self) -> SimResult:
        out = []
        for r in sorted(self.done, key=lambda r: r.index):
            tpot = None
            if r.first_s is not None and r.finish_s is not None and r.output > 1:
                tpot = (r.finish_s - r.first_s) / (r.output - 1)
            out.append(
                RequestResult(
                    index=r.index,
                    arrival_s=r.arrival_s - self.outside,  # when it was sent
                    prompt_tokens=r.prompt,
                    output_tokens=r.output,
                    ttft_s=None if r.first_s is None else r.first_s - r.arrival_s + self.outside,
                    tpot_s=tpot,
                    finish_s=r.finish_s,
                    pool_hit_tokens=r.pool_hit,
                    tier_hit_tokens=tuple(r.tier_hit),
                    recomputed_tokens=r.recomputed if r.admitted else 0,
                    preemptions=r.preemptions,
                    preempted_recompute_tokens=r.recompute_again,
                    gated=r.gated,
                )
            )
        return SimResult(
            layout=self.layout.name,
            tier_kinds=tuple(t.kind for t in self.layout.tiers),
            requests=tuple(out),
            steps=self.group.clock,
            busy_s=self.busy,
            busy_by=dict(self.busy_by),
            start_s=self.start - self.outside,
            end_s=max((r.finish_s for r in self.done if r.finish_s is not None), default=self.start),
        )
