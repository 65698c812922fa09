"""Session sampling and block scaling of a trace.

A few hundred consecutive requests of a production trace reuse little: reuse spans the whole
trace. Keeping whole sessions keeps it (AIPerf's ``--trace-session-sample-ratio`` samples the same
way): a request is kept when a stable hash of its session falls in the sample. Mooncake rows carry
no session, so the session is the request's second block id (its first is often a system prompt
shared by everyone), else its first. Mooncake's ids are remapped sequential integers, so a
1-in-N sample of block-id sessions keeps the ids equal to ``seed`` modulo N (1 in 40 of the
conversation trace: 342 requests, 42% of their prompt tokens reusable at unbounded size); other
ratios and named sessions go through a keyed hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import replace

from kvstack.errors import InputError
from kvstack.traces.mooncake import Trace, TraceRow


def session_key(request: TraceRow) -> str | int:
    """The request's session: its session_id, else its second block id, else its first."""
    if request.session_id is not None:
        return request.session_id
    ids = request.hash_ids
    return ids[1] if len(ids) > 1 else ids[0]


def _hashed(key: str | int, seed: int) -> float:
    digest = hashlib.blake2b(f"{seed}:{type(key).__name__}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _keeper(ratio: float, seed: int) -> Callable[[str | int], bool]:
    every = round(1 / ratio)
    if abs(every * ratio - 1) < 1e-9:
        return lambda key: (key - seed) % every == 0 if isinstance(key, int) else _hashed(key, seed) < ratio
    return lambda key: _hashed(key, seed) < ratio


def sample_sessions(requests: Sequence[TraceRow], ratio: float, seed: int = 0) -> list[TraceRow]:
    """The requests whose session hashes into the first ``ratio`` of [0, 1) (stable across runs,
    machines and Python hash seeds); ``ratio`` 1 keeps all."""
    if not 0 < ratio <= 1:
        raise InputError(
            f"the session sample ratio must be in (0, 1], not {ratio:g}", hint="e.g. 0.025 (1 in 40)"
        )
    if ratio >= 1:
        return list(requests)
    keeps = _keeper(ratio, seed)
    cache: dict[str | int, bool] = {}
    out: list[TraceRow] = []
    for r in requests:
        key = session_key(r)
        keep = cache.get(key)
        if keep is None:
            keep = cache[key] = keeps(key)
        if keep:
            out.append(r)
    return out


def parse_ratio(text: str) -> float:
    """``0.025``, ``1/40`` or ``2.5%`` -> 0.025 (bad input: InputError)."""
    raw = text.strip()
    try:
        if raw.endswith("%"):
            value = float(raw[:-1]) / 100
        elif "/" in raw:
            num, den = raw.split("/", 1)
            value = float(num) / float(den)
        else:
            value = float(raw)
    except (ValueError, ZeroDivisionError) as exc:
        raise InputError(
            f"--trace-sample must be a fraction (0.025, 1/40 or 2.5%), not {text!r}", hint="e.g. 1/40"
        ) from exc
    if not 0 < value <= 1:
        raise InputError(f"--trace-sample must be in (0, 1], not {text!r}", hint="e.g. 1/40")
    return value


def scale_request(request: TraceRow, block_tokens: int, from_tokens: int) -> TraceRow:
    """The request with its blocks ``block_tokens`` long instead of ``from_tokens`` (same ids, same
    block count, the partial last block scaled in proportion)."""
    n = len(request.hash_ids)
    scaled = round(request.input_length * block_tokens / from_tokens)
    return replace(request, input_length=max((n - 1) * block_tokens + 1, scaled, 1))


def scale_blocks(trace: Trace, block_tokens: int) -> Trace:
    """The trace with each block ``block_tokens`` tokens long (prompts shrink or grow in proportion,
    reuse stays the same): what fits a small model's context."""
    if block_tokens < 1:
        raise InputError(
            f"--block-tokens must be at least 1, not {block_tokens}", hint="e.g. --block-tokens 64"
        )
    if block_tokens == trace.block_tokens:
        return trace
    requests = [scale_request(r, block_tokens, trace.block_tokens) for r in trace.requests]
    return replace(trace, requests=requests, block_tokens=block_tokens)


def with_requests(trace: Trace, requests: list[TraceRow]) -> Trace:
    return replace(trace, requests=requests)
