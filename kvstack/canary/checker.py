"""The canary's loop against one server: plant probes, ask one again each interval, judge the answer.

Each check asks a probe planted at least an interval earlier (canary/probes.py), reads which cache
served it from the counters around that one request (canary/attribution.py), and judges its greedy
tokens against a recompute that reads no cache (validation/scoring.py: vLLM skips the prefix cache
and the connector for a request with prompt log-probabilities, and a fresh ``cache_salt`` keys it
apart from everything cached; SGLang's ``/generate`` from position 0) by validation's gate
(validation/correctness.py) and the noise floor the startup validation measured, or, without one,
measured here the same way on the first probes' own cold answers.

Every request is paid for from the prefill budget (canary/budget.py); nothing is sent while it is
spent, so the canary never takes more than its share of the engine's prefill.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from kvstack.canary.attribution import served_from
from kvstack.canary.budget import PrefillBudget
from kvstack.canary.defaults import DEFAULT_BUDGET, DEFAULT_INTERVAL_S
from kvstack.canary.probes import DEFAULT_POOL, Probe, ProbePool
from kvstack.canary.state import CanaryState, CheckRecord
from kvstack.clients import metrics as m
from kvstack.clients import quiet
from kvstack.clients.metrics import MetricsSnapshot
from kvstack.clients.quiet import holder
from kvstack.clients.streaming import RequestResult
from kvstack.validation import correctness
from kvstack.validation.isolation import chunk_tokens, covering_tokens
from kvstack.validation.noise import NoiseFloor, measure
from kvstack.validation.prompts import PromptBuilder
from kvstack.validation.report import ValidationTarget
from kvstack.validation.server_api import ServerApi

DEFAULT_PROBE_TOKENS = 1024
NOISE_PROBES = 3  # cold answers that set the gate when no validation measured one
NOISE_METHOD = "the canary's first probes' cold answers (nonce-led: nothing cached), scored by a recompute"
TICK_S = 0.25
BUDGET_RETRY_S = 1.0


@dataclass
class CanaryConfig:
    interval_s: float = DEFAULT_INTERVAL_S
    budget: float = DEFAULT_BUDGET
    probe_tokens: int | None = None  # None: DEFAULT_PROBE_TOKENS, within the model's context
    pool: int = DEFAULT_POOL


class Canary:
    """One canary against one server. ``run`` until ``stopped()``; each judged check goes to
    ``on_check`` and into ``state`` (under ``lock`` where another thread reads it)."""

    def __init__(
        self,
        target: ValidationTarget,
        config: CanaryConfig,
        state: CanaryState,
        noise: NoiseFloor | None,
        on_check: Callable[[CheckRecord], None],
        on_change: Callable[[], None],
        stopped: Callable[[], bool],
        paused: Callable[[], bool] = lambda: False,
        lock: AbstractContextManager[object] | None = None,
        budget: PrefillBudget | None = None,
        replica: str | None = None,
    ) -> None:
        self.target = target
        self.replica = replica  # the engine's name in its checks, when the canary watches several
        self.config = config
        self.state = state
        self.noise = noise if noise is not None and noise.known else None
        self.on_check = on_check
        self.on_change = on_change
        self.stopped = stopped
        self.paused = paused
        self.lock = lock or contextlib.nullcontext()  # held while ``state`` changes
        self.pool = ProbePool(config.pool)
        self.engine: str = target.engine or "vllm"
        self.n = config.probe_tokens or DEFAULT_PROBE_TOKENS
        self.need = 0
        self.budget = budget  # kept by the runner across engine restarts; None: from the first scrape
        self.last_asked: float | None = None  # when the last check asked its probe (monotonic)

    async def run(self) -> None:
        async with ServerApi(self.target, None) as api:
            await self._run(api)

    async def _run(self, api: ServerApi) -> None:
        await api.discover()
        first = await api.scrape()
        self.engine = self.target.engine or first.engine or "vllm"
        if api.max_model_len:
            self.n = min(self.n, api.max_model_len - self.target.correctness_tokens - 8)
        self.need = covering_tokens(self.n, chunk_tokens(self.target.connector, self.target.chunk_tokens))
        with self.lock:
            self.state.probe_tokens = self.n
        builder = PromptBuilder(api.tokenize)
        if self.budget is None:
            self.budget = PrefillBudget(self.config.budget, first)
        budget = self.budget
        budget.update(first)
        if self.noise is not None:
            self._set_gate(self.noise, "the startup validation's noise floor")
        next_check = time.monotonic() + self.config.interval_s
        while not self.stopped():
            if self.paused():
                await asyncio.sleep(TICK_S)
                continue
            held = holder(self.target.base_url)
            if held is not None:  # this user's validate/bench/tune reads the counters: send nothing
                self._waiting(f"held off: kvstack (pid {held}) is measuring this server")
                await self._wait(BUDGET_RETRY_S)
                continue
            snap = await api.scrape()
            budget.update(snap)
            self._cost(budget)
            now = time.monotonic()
            if self.noise is None:
                await self._measure_noise(api, builder, budget)
                continue
            if len(self.pool) < 2 and not await self._plant(api, builder, budget):
                await self._wait(BUDGET_RETRY_S)
                continue
            if now < next_check:
                await self._wait(min(next_check - now, 1.0))
                continue
            probe = self.pool.take(now, self.config.interval_s, self.last_asked)
            if probe is None:
                next_check = now + TICK_S * 4
                continue
            # Asked (at most every token computed) and scored; a check that fails costs more (_confirm).
            cost = self.n + self.n + self.target.correctness_tokens
            if not budget.allows(cost):
                self.pool.add(probe)  # not asked: it stays
                self._waiting(f"budget: {budget.needed(cost):,.0f} more computed prompt tokens of traffic")
                await self._wait(BUDGET_RETRY_S)
                continue
            with quiet.busy(self.target.base_url) as free:
                if free:
                    await self._check(api, probe, budget)
                else:  # a measurement took the server meanwhile: the probe waits for the next turn
                    self.pool.add(probe)
                    continue
            await self._plant(api, builder, budget)
            next_check = time.monotonic() + self.config.interval_s

    async def _wait(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.stopped() and time.monotonic() < end:
            await asyncio.sleep(min(TICK_S, max(0.0, end - time.monotonic())))

    def _waiting(self, why: str) -> None:
        with self.lock:
            changed = self.state.status not in ("fallback", "stopped") and self.state.waiting_for != why
            if changed:
                self.state.status, self.state.waiting_for = "waiting", why
        if changed:
            self.on_change()

    def _watching(self) -> None:
        with self.lock:
            if self.state.status not in ("fallback", "stopped"):
                self.state.status, self.state.waiting_for = "watching", ""

    def _cost(self, budget: PrefillBudget) -> None:
        with self.lock:
            self.state.canary_tokens = budget.spent
            self.state.engine_tokens = budget.engine
            self.state.engine_prefill_s = budget.engine_seconds

    def _set_gate(self, noise: NoiseFloor, source: str) -> None:
        self.noise = noise
        with self.lock:
            self.state.gate = noise.threshold
            self.state.noise = f"{source}: {noise.line()}"
        self.on_change()

    async def _plant(self, api: ServerApi, builder: PromptBuilder, budget: PrefillBudget) -> bool:
        if not budget.allows(self.n):
            need = budget.needed(self.n)
            self._waiting(f"budget: {need:,.0f} more computed prompt tokens of traffic to plant a probe")
            return False
        with quiet.busy(self.target.base_url) as free:
            if not free:  # a measurement took the server meanwhile
                return False
            prompt = await builder.build(self.n)
            r = await api.send(prompt)
        budget.spend(self.n)
        if r.ok:
            self.pool.add(Probe(prompt, time.monotonic()))
        return r.ok

    async def _measure_noise(self, api: ServerApi, builder: PromptBuilder, budget: PrefillBudget) -> None:
        """The gate from cold answers, when no validation gave one: NOISE_PROBES fresh probes
        answered and scored. They are planted too."""
        cost = NOISE_PROBES * (2 * self.n + self.target.correctness_tokens)
        if not budget.allows(cost):
            self._waiting(
                f"budget: {budget.needed(cost):,.0f} more computed prompt tokens to measure the noise floor"
            )
            await self._wait(BUDGET_RETRY_S)
            return
        samples = []
        for _ in range(NOISE_PROBES):
            with quiet.busy(self.target.base_url) as free:
                if not free:
                    return
                prompt = await builder.build(self.n)
                r = await api.send(prompt, generate=True)
                samples.append((r, await api.score(prompt, r, self.engine)))
            budget.spend(2 * self.n + self.target.correctness_tokens)
            if r.ok:
                self.pool.add(Probe(prompt, time.monotonic()))
        noise = measure(samples, NOISE_METHOD, self.target.noise_ceiling)
        if noise.known:
            self._set_gate(noise, "measured by the canary")
        else:
            self._waiting(f"the noise floor could not be measured ({noise.detail}); trying again")
            await self._wait(self.config.interval_s)

    async def _check(self, api: ServerApi, probe: Probe, budget: PrefillBudget) -> None:
        assert self.noise is not None
        asked_at, asked_wall = time.monotonic(), time.time()
        self.last_asked = asked_at
        before = await api.scrape()
        r = await api.send(probe.prompt, generate=True)

        def where(snap: MetricsSnapshot) -> tuple[str, dict[str, float]]:
            return served_from(self.engine, before, snap, self.need, self.target_adapters, self.cache_server)

        after = await api.settled(before, lambda snap: where(snap)[0] != "recompute")
        source, hits = where(after)
        covered = max((v for k, v in hits.items() if k in ("gpu", "offload")), default=0.0)
        budget.spend(max(0, self.n - int(min(covered, self.n))))
        if not r.ok:
            failed = f"the probe's request failed: {r.error}"
            check = correctness.judge(r, failed, self.target.correctness_tokens, self.noise)
        else:
            check = await self._judged(api, probe, r, budget)
            if check.verdict == "fail":
                check = await self._confirm(api, probe, r, check, budget)
        running = before.get(m.VLLM_RUNNING) if before.samples else None
        record = CheckRecord(
            at=time.time(),
            asked_at=asked_wall,
            probe=probe.name,
            age_s=round(asked_at - probe.planted_at, 1),
            served_from=source,
            hit_tokens={k: round(v) for k, v in hits.items() if v},
            prompt_tokens=self.n,
            verdict=check.verdict,
            typical=check.typical,
            worst=check.worst,
            gate=check.threshold,
            in_flight=running if running is None else max(0.0, running),
            detail=check.detail,
            replica=self.replica,
        )
        self._watching()
        with self.lock:
            self.state.record(record)
        self._cost(budget)
        self.on_check(record)

    async def _judged(
        self, api: ServerApi, probe: Probe, served: RequestResult, budget: PrefillBudget
    ) -> correctness.CorrectnessCheck:
        """The served answer judged by one recompute of the probe (its prefill paid from the budget)."""
        assert self.noise is not None
        scores = await api.score(probe.prompt, served, self.engine)
        budget.spend(self.n + len(served.token_ids))
        return correctness.judge(served, scores, self.target.correctness_tokens, self.noise)

    async def _confirm(
        self,
        api: ServerApi,
        probe: Probe,
        served: RequestResult,
        first: correctness.CorrectnessCheck,
        budget: PrefillBudget,
    ) -> correctness.CorrectnessCheck:
        """A failed check scored again by a second recompute before it counts. Wrong KV stays wrong
        (the served tokens do not change); a recompute that a busy batch moved does not repeat. In one
        CI run a clean real model under two streams of load measured 0.0501 nats against the 0.05
        gate on its first check, and that one check turned the tiers off (tests/e2e/test_canary.py)."""
        second = await self._judged(api, probe, served, budget)
        if second.verdict != "pass":
            return await self._beside_recompute(api, probe, first, budget)
        second.detail = (
            f"passed on a second recompute; the first put it {first.typical:.3f} nats from recompute, "
            f"over the {first.threshold:.3f}-nat gate (numerics, not wrong KV)"
        )
        return second

    async def _beside_recompute(
        self, api: ServerApi, probe: Probe, failed: correctness.CorrectnessCheck, budget: PrefillBudget
    ) -> correctness.CorrectnessCheck:
        """A check failed by both recomputes judged beside the recompute's own answer to the probe (one
        that reads no cache), scored the same way: on some prompts an engine's decode sits that far from
        its own prefill whatever the KV's source (validation/correctness.py). Wrong KV still fails. Like
        the second recompute, it is spent whatever the budget: a false alarm turns the tiers off."""
        assert self.noise is not None
        own, scores = await api.recompute_scored(probe.prompt, self.engine)
        if not isinstance(own, str):
            budget.spend(self.n + self.n + len(own.token_ids))  # the answer's prefill, then its scoring's
        return correctness.beside_recompute(failed, own, scores, self.noise.ceiling)

    @property
    def target_adapters(self) -> dict[str, str]:
        return {t.kind: t.adapter for t in self.target.tiers if t.adapter}

    @property
    def cache_server(self) -> bool:
        return self.target.cache_server_url is not None
