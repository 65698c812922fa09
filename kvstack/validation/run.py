"""The TTFT validation pass: prove with numbers that the prefix cache and every offload tier serve
hits, and that what they serve gives recompute's answer.

Protocol (TTFT is the time to the first streamed token with non-empty choices, as vLLM's and
SGLang's benchmark clients measure it):
  cold       unique prompts (nonce first): the recompute TTFT
  warm       the same prompts again: faster by ``min_speedup``, the prefix cache served each one
  tier:KIND  per offload tier (validation/tier_step.py): a fresh prompt, every copy above the tier
             dropped (validation/isolation.py), the prompt again: the tier served it, faster by
             ``min_tier_speedup`` than its recompute
  diagnosis  known silent failures in the engine log
Every served request's tokens are judged by a recompute (validation/correctness.py). Overall PASS
only when no step fails and the warm step passed.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from kvstack.clients import quiet
from kvstack.connectors import spec_of
from kvstack.connectors.engines import ENGINE_SPECS
from kvstack.errors import InputError
from kvstack.names import Engine
from kvstack.planning.engine_kv import KvExpectation, kv_expectation
from kvstack.planning.schema import Plan
from kvstack.runtime.specs import LaunchSpec
from kvstack.units import GIB
from kvstack.validation.diagnosis import Diagnosis, scan_log
from kvstack.validation.isolation import step_plan
from kvstack.validation.kv_size import blocks_override, kv_size_step
from kvstack.validation.load import Load
from kvstack.validation.prediction import apply_predictions
from kvstack.validation.report import (
    StepResult,
    TierTarget,
    ValidationReport,
    ValidationTarget,
    check_target,
)
from kvstack.validation.server_api import ServerApi
from kvstack.validation.steps import Progress, Validation
from kvstack.validation.thresholds import DEFAULT_MIN_SPEEDUP, DEFAULT_MIN_TIER_SPEEDUP
from kvstack.validation.tier_step import tier_step

DEFAULT_PROMPT_TOKENS = 4096
LOAD_MIN_TOKENS = 256


def target_from_launch(
    spec: LaunchSpec,
    plan: Plan,
    *,
    api_key: str | None = None,
    remote_url: str | None = None,
    log_file: str | Path | None = None,
    prompt_tokens: int | None = None,
    min_speedup: float | None = None,
    min_tier_speedup: float | None = None,
) -> ValidationTarget:
    """The target for a server ``kvstack serve`` started from ``plan`` and ``spec``.

    ``remote_url`` (with credentials) lets the remote tier's step ping the store it depends on.
    """
    tiers = [
        TierTarget(
            kind=t.kind,
            path=spec.cache_dirs.get(t.kind) or t.path,
            url=remote_url if t.kind == "remote" else None,
            adapter=spec.tier_adapters.get(t.kind),
        )
        for t in plan.offload_tiers
        if t.kind in ("cpu", "disk", "remote")
    ]
    return ValidationTarget(
        base_url=spec.base_url,
        model=spec.served_model_name,
        api_key=api_key,
        # What it launched when that is an engine; a router in front (vllm-router) is judged by
        # the /metrics it serves.
        engine=cast(Engine, spec.engine) if spec.engine in ENGINE_SPECS else None,
        platform=plan.platform,
        tiers=tiers,
        reset_path=spec.reset_cache_path,
        metrics_urls=list(spec.metrics_urls),
        cache_server_url=spec.cache_server_url,
        connector=spec.connector if spec_of(spec.connector).offloads else None,
        chunk_tokens=plan.cache.chunk_size or None,
        batch_invariant=spec.server.env.get(
            "VLLM_BATCH_INVARIANT", os.environ.get("VLLM_BATCH_INVARIANT", "0")
        )
        not in ("", "0"),
        log_file=str(log_file) if log_file else None,
        prompt_tokens=prompt_tokens,
        secrets=list(spec.secrets),
        prediction=plan.ttft,
        kv_expectation=_kv_expectation(spec, plan),
        no_prefix_cache=None if plan.cache.prefix_caching else plan.reasons.get("prefix_caching", "off"),
        min_speedup=DEFAULT_MIN_SPEEDUP if min_speedup is None else min_speedup,
        min_tier_speedup=DEFAULT_MIN_TIER_SPEEDUP if min_tier_speedup is None else min_tier_speedup,
    )


def _kv_expectation(spec: LaunchSpec, plan: Plan) -> KvExpectation | None:
    """The plan's KV pool as the engine will log it: vLLM only (the line is vLLM's)."""
    own = ENGINE_SPECS.get(spec.engine)
    if own is None or not own.logs_kv_pool:
        return None
    space = spec.server.env.get("VLLM_CPU_KVCACHE_SPACE")
    pool = int(space) * GIB if plan.platform == "cpu" and space and space.isdigit() else None
    return kv_expectation(plan, pool, num_blocks_override=blocks_override(spec.server.argv))


def _diagnosis_step(target: ValidationTarget, diagnoses: list[Diagnosis]) -> StepResult:
    if target.log_file is None:
        return StepResult(name="diagnosis", verdict="skip", reason="no engine log given (--log)")
    errors = [d for d in diagnoses if d.severity == "error"]
    evidence = [f"{d.name}: {d.explanation} ({d.count}x, first at line {d.first_line})" for d in diagnoses]
    if errors:
        return StepResult(
            name="diagnosis",
            verdict="fail",
            reason="the engine log shows: " + ", ".join(d.name for d in errors),
            evidence=evidence,
        )
    clean = [f"no known silent failure in {target.log_file}"]
    return StepResult(name="diagnosis", verdict="pass", evidence=evidence or clean)


def _connector_not_in_use(target: ValidationTarget) -> str | None:
    """Why no tier can serve a hit, where the engine log has the connector's own word for it (LMCache
    in degraded mode): its tier steps fail unmeasured rather than spend seconds a request proving it."""
    if target.log_file is None:
        return None
    said = [d for d in scan_log(Path(target.log_file), target.secrets) if d.serves_nothing]
    if not said:
        return None
    d = said[0]
    return f"not measured: the engine log shows {d.name} (line {d.first_line}): {d.explanation}"


def _no_tier_reason(target: ValidationTarget) -> str:
    if target.platform == "cpu":
        return "no offload tier on a CPU platform"
    return "no offload tier to check (none in the plan, or none given with --tier/--cache-dir)"


async def run_validation_async(
    target: ValidationTarget,
    on_progress: Progress | None = None,
    between: Callable[[], None] | None = None,
) -> ValidationReport:
    """Run the pass. Raises InputError subclasses for bad targets; server failures become verdicts.

    ``between`` runs before every request; ``kvstack serve`` passes a check that raises when the
    engine died, so a crash is reported as such rather than as a slow tier.
    """
    check_target(target)
    with quiet.hold(target.base_url):  # this server's canary sends nothing while the pass measures
        return await _validate(target, on_progress, between)


async def _validate(
    target: ValidationTarget, on_progress: Progress | None, between: Callable[[], None] | None
) -> ValidationReport:
    t0 = time.monotonic()
    s = ServerApi(target, between)
    try:
        await s.discover()
        first = await s.scrape()
        engine = target.engine or first.engine or "vllm"
        limit = (s.max_model_len - 8) if s.max_model_len else None
        n = target.prompt_tokens or min(DEFAULT_PROMPT_TOKENS, limit or DEFAULT_PROMPT_TOKENS)
        if limit is not None and n > limit:
            raise InputError(
                f"--prompt-tokens {n} does not fit the model's context ({s.max_model_len} tokens)",
                hint=f"use --prompt-tokens {limit} or less",
            )
        v = Validation(s, engine, n, on_progress)
        report = ValidationReport.of(target, model=s.model, engine=engine, prompt_tokens=n)
        if first.errors and not first.samples:
            v.progress(f"metrics unavailable: {first.errors[0]}")
        # An engine whose cache server died still answers /health and hangs every request.
        down = await v.cache_server.problem() if v.cache_server is not None else None
        # A connector that says it serves nothing (LMCache in degraded mode) fails its tiers at once:
        # on vllm-cpu each of its requests waits seconds for a lookup that cannot answer.
        idle = _connector_not_in_use(target) if target.tiers else None
        if down is not None:
            report.steps.append(StepResult(name="cold", verdict="fail", reason=down))
        elif idle is not None:
            v.progress("the engine log shows the connector serves nothing: nothing is measured")
            unused = "not measured: the offload connector is not in use"
            report.steps += [
                StepResult(name=step, verdict="skip", reason=unused) for step in ("cold", "warm")
            ]
            report.steps += [
                StepResult(name=f"tier:{t.kind}", verdict="fail", reason=idle) for t in target.tiers
            ]
        elif err := await v.warmup():
            report.steps.append(StepResult(name="cold", verdict="fail", reason=err))
        else:
            async with _load(target, s, n) as load:
                await _steps(v, target, engine, report)
            report.load = load.report() if target.concurrency > 1 else None
            if report.load is not None:
                v.progress(report.load.line())
        report.prompt_tokens_exact = v.builder.tokenizer is not None
        apply_predictions(report, target.prediction)
        if target.log_file is not None:
            report.diagnoses = scan_log(Path(target.log_file), target.secrets)
        diag = _diagnosis_step(target, report.diagnoses)
        report.steps.append(diag)
        if target.kv_expectation is not None and target.log_file is not None:
            report.steps.append(kv_size_step(target.kv_expectation, Path(target.log_file)))
        if diag.verdict == "fail":
            for step in report.steps:
                if step.name.startswith("tier") and step.verdict == "fail" and step.reason != idle:
                    step.reason += f" (likely cause: {diag.reason.removeprefix('the engine log shows: ')})"
        report.decide()
        report.duration_s = round(time.monotonic() - t0, 3)
        return report
    finally:
        await s.aclose()


def _load(target: ValidationTarget, s: ServerApi, n: int) -> Load:
    """The requests in flight beside the judged ones: ``concurrency - 1`` streams of fresh prompts a
    quarter as long as the validation prompts, each decoding DEFAULT_LOAD_TOKENS (none for a quiet
    pass): what a serving engine has in flight, mostly decoding."""
    return Load(
        target.base_url,
        s.model,
        target.api_key,
        streams=max(0, target.concurrency - 1),
        prompt_tokens=max(LOAD_MIN_TOKENS, n // 4),
        tokenizer=s.tokenize,
        timeout_s=target.timeout_s,
    )


async def _steps(v: Validation, target: ValidationTarget, engine: str, report: ValidationReport) -> None:
    """cold and warm, then each tier: into ``report``."""
    cold, warm = await v.cold_warm()
    report.noise_floor = v.noise
    report.steps += [cold, warm]
    if cold.verdict != "pass":
        report.steps += [
            StepResult(name=f"tier:{t.kind}", verdict="skip", reason="the cold step failed")
            for t in target.tiers
        ]
    elif not target.tiers:
        report.steps.append(StepResult(name="tier", verdict="skip", reason=_no_tier_reason(target)))
    else:
        kinds = [t.kind for t in target.tiers]
        for tier in target.tiers:
            plan = step_plan(target.connector, engine, tier.kind, kinds)
            report.steps.append(await tier_step(v, tier, plan))


def run_validation(
    target: ValidationTarget, on_progress: Progress | None = None, between: Callable[[], None] | None = None
) -> ValidationReport:
    return asyncio.run(run_validation_async(target, on_progress, between))
