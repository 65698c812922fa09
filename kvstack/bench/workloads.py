"""Cache-heavy bench workloads, deterministic for a seed.

Each workload is a list of rounds (run in order: a warm-up round completes before the query round)
of requests. A prompt is a tuple of text segments; segments are shared objects, so the prompts of a
multi-turn run with long histories cost the memory of their unique segments, not of every prompt.
Every request records the prefix length a perfect cache would already hold when its round starts
(the longest run of leading segments it shares with any request of an earlier round), so hit rates
can be judged against what was possible.

Prompts that must miss start with a nonce whose FIRST word differs between consecutive prompts
(a shared first block would be a partial prefix-cache hit). Shared text (documents, system prompts)
starts with a run nonce drawn from the seed, so a different seed never hits an earlier run's cache.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from kvstack.bench.text import TextBuilder
from kvstack.clients.metrics import SGLANG_MAX_TOTAL_TOKENS, VLLM_CACHE_CONFIG_INFO, MetricsSnapshot
from kvstack.errors import WorkloadError
from kvstack.planning.schema import Plan

WORKLOADS: tuple[str, ...] = ("long-doc-qa", "multi-turn", "shared-prefix", "tier-overflow", "random")
MAX_REQUESTS = 100_000


@dataclass(frozen=True)
class WorkloadSpec:
    """What the user asked for; per-workload shapes left None are derived from the totals."""

    name: str = "long-doc-qa"
    requests: int = 64
    prompt_tokens: int = 2048
    output_tokens: int = 16
    seed: int = 0
    documents: int | None = None  # long-doc-qa
    queries_per_document: int = 1  # long-doc-qa: query-round requests per document
    question_tokens: int = 32  # long-doc-qa, tier-overflow: the unique tail after a document
    users: int | None = None  # multi-turn
    turns: int = 4  # multi-turn
    turn_tokens: int = 128  # multi-turn: each user message
    answer_tokens: int = 64  # multi-turn: each (synthetic) assistant answer kept in the history
    suffix_tokens: int = 64  # shared-prefix: the unique tail after the shared system prompt
    overflow_factor: float = 1.5  # tier-overflow: working set / capacity that must be overflowed
    overflow_rounds: int = 2  # tier-overflow: one fill round, then re-reads

    def validate(self) -> None:
        if self.name not in WORKLOADS:
            raise WorkloadError(
                f"unknown workload {self.name!r}", hint=f"choose one of: {', '.join(WORKLOADS)}"
            )
        positive = {
            "--requests": self.requests,
            "--prompt-tokens": self.prompt_tokens,
            "--output-tokens": self.output_tokens,
            "turns": self.turns,
            "queries per document": self.queries_per_document,
        }
        for what, value in positive.items():
            if value < 1:
                raise WorkloadError(f"{what} must be at least 1, not {value}", hint=f"e.g. {what} 64")
        if self.overflow_factor <= 1.0 or self.overflow_rounds < 2:
            raise WorkloadError(
                "tier-overflow needs a working set above capacity (factor > 1) and at least 2 rounds",
                hint="use the defaults (factor 1.5, 2 rounds)",
            )


@dataclass(frozen=True)
class TierSizes:
    """KV tokens each tier holds; what tier-overflow must exceed."""

    gpu_tokens: int
    cpu_tokens: int | None = None
    has_disk: bool = False
    source: str = "plan"

    @property
    def capacity_to_overflow(self) -> int:
        """The GPU pool, plus the CPU tier when a disk tier below it must serve the re-reads."""
        if self.has_disk and self.cpu_tokens:
            return self.gpu_tokens + self.cpu_tokens
        return self.gpu_tokens


def tier_sizes_from_plan(plan: Plan) -> TierSizes:
    gpu = plan.tier("gpu")
    if gpu is None or gpu.tokens <= 0:
        raise WorkloadError(
            "tier-overflow needs the plan's GPU pool size and this plan has no GPU tier",
            hint="use a plan made for a GPU machine, or another workload",
        )
    cpu = plan.tier("cpu")
    return TierSizes(
        gpu_tokens=gpu.tokens,
        cpu_tokens=cpu.tokens if cpu else None,
        has_disk=plan.tier("disk") is not None,
        source="plan",
    )


def _int_label(labels: dict[str, str], key: str) -> int | None:
    raw = labels.get(key, "")
    return int(raw) if raw.isdigit() else None


def tier_sizes_from_metrics(snap: MetricsSnapshot) -> TierSizes | None:
    """Cache sizes a running server exposes on /metrics, or None when it shows none.

    vLLM: ``vllm:cache_config_info`` labels ``num_gpu_blocks`` x ``block_size`` (and
    ``num_cpu_blocks`` for native offload); SGLang: ``sglang:max_total_num_tokens`` and
    ``sglang:hicache_host_total_tokens``. A disk tier is not visible in either: it is assumed absent.
    """
    for labels in snap.label_sets(VLLM_CACHE_CONFIG_INFO):
        blocks = _int_label(labels, "num_gpu_blocks")
        size = _int_label(labels, "block_size")
        if blocks and size:
            cpu_blocks = _int_label(labels, "num_cpu_blocks")
            cpu = cpu_blocks * size if cpu_blocks else None
            return TierSizes(blocks * size, cpu, False, "server /metrics")
    gpu = snap.get(SGLANG_MAX_TOTAL_TOKENS)
    if gpu:
        host = snap.get("sglang:hicache_host_total_tokens")
        return TierSizes(int(gpu), int(host) if host else None, False, "server /metrics")
    return None


@dataclass(frozen=True)
class WorkloadRequest:
    id: str
    index: int  # position in the generation order
    round: int
    turn: int | None  # multi-turn only
    group: str  # document, user, ... the unit of reuse
    segments: tuple[str, ...]
    prompt_tokens: int  # exact when the tokenizer is exact; special tokens excluded
    shared_prefix_tokens: int  # what a perfect cache already holds when this request is sent
    output_tokens: int

    @property
    def prompt(self) -> str:
        return "".join(self.segments)


@dataclass(frozen=True)
class RequestSet:
    """The requests one bench run sends, in rounds (planning's ``Workload`` is a traffic profile)."""

    spec: WorkloadSpec
    requests: tuple[WorkloadRequest, ...]
    round_labels: tuple[str, ...]
    tokenizer: str
    exact: bool
    notes: tuple[str, ...] = ()
    shape: dict[str, int | float] = field(default_factory=dict)

    def rounds(self) -> list[list[WorkloadRequest]]:
        out: list[list[WorkloadRequest]] = [[] for _ in self.round_labels]
        for r in self.requests:
            out[r.round].append(r)
        return out

    @property
    def total_prompt_tokens(self) -> int:
        return sum(r.prompt_tokens for r in self.requests)


class _Maker:
    """Shared state while one workload is generated: rng, nonces, prefix bookkeeping."""

    def __init__(self, spec: WorkloadSpec, builder: TextBuilder, distinct: int) -> None:
        self.spec = spec
        self.b = builder
        self.rng = random.Random(f"kvstack-bench:{spec.name}:{spec.seed}")
        self.width = builder.nonce_width(distinct + 16)
        self.salt = self.rng.randrange(len(builder.singles) ** self.width)
        self.counter = 0
        self.requests: list[WorkloadRequest] = []
        self._trie: dict[str, dict[str, object]] = {}  # segment text -> children
        self._pending: list[tuple[str, ...]] = []  # prompts of the round being generated
        self._round = 0
        self._costs: dict[str, int] = {}

    def unique(self, tokens: int) -> str:
        """Text unique from its first token (nonce first)."""
        nonce = self.b.nonce(self.salt + self.counter, self.width)
        self.counter += 1
        return self._sized(self.b.text(tokens, self.rng, nonce), tokens)

    def plain(self, tokens: int) -> str:
        return self._sized(self.b.filler(tokens, self.rng), tokens)

    def _sized(self, segment: str, tokens: int) -> str:
        # The intended size: a prompt is fitted to the sum of its segments' intended sizes, which
        # equals the measured size whenever the tokenizer counts additively.
        self._costs[segment] = self.b.measure(segment) if self.b.additive else tokens
        return segment

    def _measure(self, segment: str) -> int:
        cost = self._costs.get(segment)  # histories repeat their segments every turn
        if cost is None:
            cost = self._costs[segment] = self.b.measure(segment)
        return cost

    def _insert(self, segments: tuple[str, ...]) -> None:
        node = self._trie
        for seg in segments:
            node = node.setdefault(seg, {})  # type: ignore[assignment]

    def _shared_prefix(self, segments: tuple[str, ...], costs: list[int]) -> int:
        """Tokens of the leading segments that requests of EARLIER rounds already sent.

        Requests of the same round run concurrently, so what they share among themselves is a
        matter of timing; earlier rounds have completed, so their prefixes are what a perfect
        cache holds. Keys are the segment texts (str hashes are cached, so this is cheap).
        """
        node = self._trie
        shared = 0
        for seg, cost in zip(segments, costs, strict=True):
            child = node.get(seg)
            if child is None:
                break
            shared += cost
            node = child  # type: ignore[assignment]
        return shared

    def add(
        self, rid: str, rnd: int, group: str, segments: list[str], turn: int | None = None
    ) -> WorkloadRequest:
        if rnd != self._round:  # rounds are generated in order: the previous one is complete
            for done in self._pending:
                self._insert(done)
            self._pending.clear()
            self._round = rnd
        costs = [self._measure(s) for s in segments]
        target = sum(costs)
        fitted, total = self.b.fit(list(segments), target, self.rng)
        if fitted[-1] is not segments[-1]:
            costs[-1] += total - target
            self._costs[fitted[-1]] = costs[-1]
        seg_tuple = tuple(fitted)
        shared = self._shared_prefix(seg_tuple, costs)
        req = WorkloadRequest(
            id=rid,
            index=len(self.requests),
            round=rnd,
            turn=turn,
            group=group,
            segments=seg_tuple,
            prompt_tokens=total,
            shared_prefix_tokens=shared,
            output_tokens=self.spec.output_tokens,
        )
        self.requests.append(req)
        self._pending.append(seg_tuple)
        return req


def _split(total: int, tail: int) -> tuple[int, int]:
    """(head, tail) token counts for a prompt of ``total`` with a unique tail of at most ``tail``."""
    tail = max(1, min(tail, total // 4)) if total > 1 else 0
    return total - tail, tail


def _random(m: _Maker) -> tuple[list[str], dict[str, int | float]]:
    for i in range(m.spec.requests):
        m.add(f"rand-{i}", 0, f"r{i}", [m.unique(m.spec.prompt_tokens)])
    return ["main"], {"requests": m.spec.requests}


def _documents(m: _Maker, docs: int, doc_tokens: int, q_tokens: int, rounds: list[list[int]]) -> None:
    """Documents unique from the first token; round r asks each listed document a new question."""
    texts = [m.unique(doc_tokens) for _ in range(docs)]
    for rnd, order in enumerate(rounds):
        for n, d in enumerate(order):
            m.add(f"doc{d}-r{rnd}-{n}", rnd, f"doc{d}", [texts[d], m.plain(q_tokens)])


def _long_doc_qa(m: _Maker) -> tuple[list[str], dict[str, int | float]]:
    s = m.spec
    q = s.queries_per_document
    docs = s.documents or max(1, s.requests // (1 + q))
    doc_tokens, q_tokens = _split(s.prompt_tokens, s.question_tokens)
    query = [d for d in range(docs) for _ in range(q)]
    m.rng.shuffle(query)
    _documents(m, docs, doc_tokens, q_tokens, [list(range(docs)), query])
    return ["warm-up", "query"], {"documents": docs, "document_tokens": doc_tokens, "queries_per_document": q}


def _multi_turn(m: _Maker) -> tuple[list[str], dict[str, int | float]]:
    s = m.spec
    users = s.users or max(1, s.requests // s.turns)
    system_tokens = max(1, s.prompt_tokens - s.turn_tokens)
    system = m.unique(system_tokens)
    history: list[list[str]] = [[system] for _ in range(users)]
    for t in range(s.turns):
        for u in range(users):
            message = m.unique(s.turn_tokens)  # each user message is new text
            req = m.add(f"user{u}-turn{t}", t, f"user{u}", [*history[u], message], turn=t)
            # A synthetic answer keeps the run deterministic; the server's real answer would
            # differ per layout and make layouts incomparable.
            history[u] = [*req.segments, m.plain(s.answer_tokens)]
    labels = [f"turn {t}" for t in range(s.turns)]
    return labels, {"users": users, "turns": s.turns, "system_tokens": system_tokens}


def _shared_prefix(m: _Maker) -> tuple[list[str], dict[str, int | float]]:
    s = m.spec
    prefix_tokens, suffix_tokens = _split(s.prompt_tokens, s.suffix_tokens)
    prefix = m.unique(prefix_tokens)
    m.add("shared-0", 0, "shared", [prefix, m.unique(suffix_tokens)])
    for i in range(1, s.requests):
        m.add(f"shared-{i}", 1, "shared", [prefix, m.unique(suffix_tokens)])
    labels = ["warm-up", "query"] if s.requests > 1 else ["warm-up"]
    return labels, {"prefix_tokens": prefix_tokens, "suffix_tokens": suffix_tokens}


def _tier_overflow(m: _Maker, tiers: TierSizes | None) -> tuple[list[str], dict[str, int | float]]:
    if tiers is None:
        raise WorkloadError(
            "tier-overflow needs the size of the GPU pool (and of the CPU tier)",
            hint="pass --plan FILE (from kvstack plan --json), or bench a vLLM/SGLang server whose "
            "/metrics shows its cache size",
        )
    s = m.spec
    capacity = tiers.capacity_to_overflow
    working_set = math.ceil(capacity * s.overflow_factor)
    doc_tokens, q_tokens = _split(s.prompt_tokens, s.question_tokens)
    docs = max(2, math.ceil(working_set / doc_tokens))
    if docs * s.overflow_rounds > MAX_REQUESTS:
        raise WorkloadError(
            f"tier-overflow would need {docs * s.overflow_rounds} requests to overflow {capacity} tokens",
            hint="raise --prompt-tokens so fewer, longer documents fill the tiers",
        )
    # The same order every round: under LRU the first documents are the first evicted, so every
    # re-read has to come from a lower tier (or be recomputed).
    order = list(range(docs))
    _documents(m, docs, doc_tokens, q_tokens, [order] * s.overflow_rounds)
    labels = ["fill", *[f"re-read {r}" for r in range(1, s.overflow_rounds)]]
    return labels, {
        "documents": docs,
        "document_tokens": doc_tokens,
        "working_set_tokens": docs * doc_tokens,
        "capacity_tokens": capacity,
        "gpu_tokens": tiers.gpu_tokens,
        "cpu_tokens": tiers.cpu_tokens or 0,
    }


def _distinct(spec: WorkloadSpec, tiers: TierSizes | None) -> int:
    """An upper bound of the nonces a workload draws, so nonces are wide enough."""
    if spec.name == "tier-overflow" and tiers is not None:
        return math.ceil(tiers.capacity_to_overflow * spec.overflow_factor) + 2
    users = spec.users or spec.requests
    return max(spec.requests, spec.documents or 0, users * spec.turns) + 2


def build_workload(spec: WorkloadSpec, builder: TextBuilder, tiers: TierSizes | None = None) -> RequestSet:
    """Generate the requests of ``spec``; the same spec and tokenizer give the same prompts."""
    spec.validate()
    maker = _Maker(spec, builder, _distinct(spec, tiers))
    makers: dict[str, Callable[[_Maker], tuple[list[str], dict[str, int | float]]]] = {
        "random": _random,
        "long-doc-qa": _long_doc_qa,
        "multi-turn": _multi_turn,
        "shared-prefix": _shared_prefix,
        "tier-overflow": lambda mk: _tier_overflow(mk, tiers),
    }
    labels, shape = makers[spec.name](maker)
    if len(maker.requests) > MAX_REQUESTS:
        raise WorkloadError(
            f"workload {spec.name} has {len(maker.requests)} requests (limit {MAX_REQUESTS})",
            hint="lower --requests",
        )
    notes: list[str] = []
    if not builder.exact:
        notes.append(f"prompt lengths are estimates ({builder.tokenizer.source})")
    if tiers is not None and spec.name == "tier-overflow":
        notes.append(f"tier sizes from {tiers.source}")
    return RequestSet(
        spec=spec,
        requests=tuple(maker.requests),
        round_labels=tuple(labels),
        tokenizer=builder.tokenizer.source,
        exact=builder.exact,
        notes=tuple(notes),
        shape=shape,
    )
