"""The plan's KV against the engine's: the tokens vLLM says its KV pool holds, from its own log.

vLLM logs "<device> KV cache size: N tokens" once its KV cache is allocated
(vllm/v1/core/kv_cache_utils.py, update_kv_cache_capacity): the pool's blocks over the blocks one
max_model_len request takes, times max_model_len. kvstack predicts the same figure from the
model's layers, the layout the plan chose (the hybrid KV cache manager on or off) and the pool's
memory (model/kv_groups.py). Within 2% the plan's KV bytes per token are the engine's; beyond it,
every tier's token and session count is off by the same factor.
"""

from __future__ import annotations

import re
from pathlib import Path

from kvstack.planning.engine_kv import KvExpectation
from kvstack.units import GIB, fmt_bytes
from kvstack.validation.diagnosis import read_log
from kvstack.validation.report import StepResult, Verdict

TOLERANCE = 0.02
_SIZE = re.compile(r"KV cache size: ([\d,]+) tokens")
# The same line goes on with the max_model_len the engine runs at (engine arguments may change it).
_LEN = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request")
_AVAILABLE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_OVERRIDE = "--num-gpu-blocks-override"
# vllm/platforms/cpu.py on an AVX512-BF16 host: the SSM state cache goes to float32.
_SSM_FLOAT32 = re.compile(r"Reset SSM cache type to float32")


def blocks_override(argv: list[str]) -> int | None:
    for i, arg in enumerate(argv):
        if arg == _OVERRIDE and i + 1 < len(argv) and argv[i + 1].isdigit():
            return int(argv[i + 1])
        if arg.startswith(_OVERRIDE + "=") and arg.split("=", 1)[1].isdigit():
            return int(arg.split("=", 1)[1])
    return None


def _last(regex: re.Pattern[str], text: str) -> str | None:
    found = regex.findall(text)
    return found[-1] if found else None


def kv_size_step(expect: KvExpectation, log_file: Path) -> StepResult:
    """PASS when the engine's logged KV token capacity is within 2% of the plan's."""
    name = "kv-size"
    try:
        text = read_log(log_file)  # diagnosis's bounded read: the head of a huge log holds the line
    except OSError as exc:
        return StepResult(name=name, verdict="skip", reason=f"cannot read the engine log: {exc}")
    logged = _last(_SIZE, text)
    if logged is None:
        return StepResult(name=name, verdict="skip", reason="the engine log has no 'KV cache size' line")
    engine_tokens = int(logged.replace(",", ""))
    expect = expect.model_copy()  # shallow: what the log says is set on this copy, not the caller's
    if (length := _last(_LEN, text)) is not None:
        expect.max_model_len = int(length.replace(",", ""))
    if _SSM_FLOAT32.search(text):
        expect.ssm_float32 = True
    pool = expect.pool_bytes
    if pool is None and (available := _last(_AVAILABLE, text)) is not None:
        pool = int(float(available) * GIB)
    if expect.num_blocks_override is not None:  # the override replaces the memory's block count
        pool = int(expect.num_blocks_override * expect.block_bytes())
    if pool is None:
        return StepResult(name=name, verdict="skip", reason="the engine log does not say the pool's memory")
    planned = (
        expect.tokens(pool)
        if expect.num_blocks_override is None
        else expect.tokens_for_blocks(expect.num_blocks_override)
    )
    ratio = engine_tokens / planned if planned else float("inf")
    layout = "on" if expect.hybrid_manager else "off"
    evidence = [
        f"engine: {engine_tokens:,} tokens in {fmt_bytes(pool)} ('KV cache size' in {log_file.name})",
        f"plan: {planned:,} tokens ({fmt_bytes(expect.bytes_per_token())}/token at max_model_len "
        f"{expect.max_model_len:,}, {expect.model.layer_summary()}, hybrid KV cache manager {layout})",
    ]
    verdict: Verdict = "pass" if abs(ratio - 1) <= TOLERANCE else "fail"
    reason = f"engine/plan = {ratio:.3f} (within {TOLERANCE:.0%} passes)"
    return StepResult(name=name, verdict=verdict, reason=reason, evidence=evidence)
