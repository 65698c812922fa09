"""Engine arguments after ``--`` that change the KV or the engine's memory: read into the plan, or
refused with the kvstack flag that owns them, so that no plan silently disagrees with the engine it
launches (the engines' parsers keep the last value, and the user's arguments come after kvstack's).

Read: ``--dtype`` (the compute dtype, and with it the KV's bytes), ``--kv-cache-dtype`` and the
tensor-parallel size. Refused: the context length and the GPU memory share, which kvstack's own
flags set and size every tier from. The other engine arguments pass through as given.
"""

from __future__ import annotations

from collections.abc import Sequence

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


def _value(field: str, raw: str) -> object:
    if field != "tp":
        return raw
    if not raw.isdigit() or int(raw) < 1:
        raise InputError(f"the tensor-parallel size among the engine arguments is {raw!r}", hint="e.g. -tp 2")
    return int(raw)


def with_engine_args(request: PlanRequest, extra: Sequence[str]) -> PlanRequest:
    """``request`` with what the engine arguments set that the plan must know; a value that
    contradicts kvstack's own flag for it is refused (exit 2)."""
    _refuse_owned(extra, request.engine)
    update: dict[str, object] = {}
    spellings = engine_spec(request.engine).kv_args
    for field, own_flag in READ.items():
        flag, aliases = spellings[field]
        raw = engine_arg(list(extra), flag, aliases)
        if raw is None:
            continue
        value, mine = _value(field, raw), getattr(request, field)
        if mine is not None and mine != value:
            raise InputError(
                f"{own_flag} {mine} and {flag} {raw} among the engine arguments disagree",
                hint=f"give it once: {own_flag} {raw}, or drop {flag} after --",
            )
        update[field] = value
    return request.model_copy(update=update) if update else request
