"""Engine arguments after ``--`` that change the KV or the engine's memory: read into the plan, or
refused with the kvstack flag that owns them, so that no plan silently disagrees with the engine it
launches (the engines' parsers keep the last value, and the user's arguments come after kvstack's).

Read: ``--dtype`` (the compute dtype, and with it the KV's bytes), ``--kv-cache-dtype`` and the
tensor-parallel size. Refused: the context length and the GPU memory share, which kvstack's own
flags set and size every tier from. The other engine arguments pass through as given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from kvstack.connectors.engines import engine_spec
from kvstack.engines.tier_kv import engine_arg
from kvstack.errors import InputError
from kvstack.planning.request import PlanRequest

# PlanRequest field -> the kvstack flag that sets it too (the engine's spellings: EngineSpec.kv_args).
READ: dict[str, str | None] = {"dtype": None, "kv_dtype": "--kv-dtype", "tp": "--tp"}


def _refuse_owned(extra: Sequence[str], engine: str) -> None:
    for flag, owner in engine_spec(engine).owned_args.items():
        if engine_arg(list(extra), flag) is not None:
            raise InputError(
                f"{flag} among the engine arguments would change what kvstack sizes the KV tiers from "
                f"without the plan knowing",
                hint=f"give it to kvstack instead: {owner} (and drop {flag} after --)",
            )


def _tp(raw: str) -> int:
    if not raw.isdigit() or int(raw) < 1:
        raise InputError(f"the tensor-parallel size among the engine arguments is {raw!r}", hint="e.g. -tp 2")
    return int(raw)


T = TypeVar("T")


def _given(
    request: PlanRequest, extra: Sequence[str], field: str, mine: T | None, parse: Callable[[str], T]
) -> T | None:
    """What the engine arguments set ``field`` to (None: nothing); refused where it contradicts
    ``mine``, what kvstack's own flag for it set."""
    flag, aliases = engine_spec(request.engine).kv_args[field]
    raw = engine_arg(list(extra), flag, aliases)
    if raw is None:
        return None
    value = parse(raw)
    if mine is not None and mine != value:
        own_flag = READ[field]
        raise InputError(
            f"{own_flag} {mine} and {flag} {raw} among the engine arguments disagree",
            hint=f"give it once: {own_flag} {raw}, or drop {flag} after --",
        )
    return value


def with_engine_args(request: PlanRequest, extra: Sequence[str]) -> PlanRequest:
    """``request`` with what the engine arguments set that the plan must know; a value that
    contradicts kvstack's own flag for it is refused (exit 2)."""
    _refuse_owned(extra, request.engine)
    # READ's fields, in its order
    dtype = _given(request, extra, "dtype", request.dtype, str)
    kv_dtype = _given(request, extra, "kv_dtype", request.kv_dtype, str)
    tp = _given(request, extra, "tp", request.tp, _tp)
    if dtype is None and kv_dtype is None and tp is None:
        return request
    out = request.model_copy()
    if dtype is not None:
        out.dtype = dtype
    if kv_dtype is not None:
        out.kv_dtype = kv_dtype
    if tp is not None:
        out.tp = tp
    return out
