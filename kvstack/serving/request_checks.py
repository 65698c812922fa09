"""What a serve request is refused or warned for before anything is planned: a router its engines
would refuse, a public bind without a key, an engine interpreter that lacks kvstack's guard."""

from __future__ import annotations

import os
import sys

from kvstack.connectors.engines import engine_spec
from kvstack.errors import InputError, MissingProgramError
from kvstack.netaddr import is_loopback
from kvstack.serving.request import ServeRequest, engine_python


def check_request(request: ServeRequest, *, dry_run: bool) -> list[str]:
    """Refuse what must not launch; return the warnings to show (a dry run starts nothing, so the
    engine's interpreter is not asked for the guard)."""
    refuse_keyed_sglang_router(request)
    exposed = exposure_warning(request)
    if not dry_run and engine_spec(request.engine).guard_in_process:
        require_guard(engine_python())
    return [exposed] if exposed is not None else []


def exposure_warning(request: ServeRequest) -> str | None:
    """What a bind that is not loopback, without a key, leaves open (None: nothing to say)."""
    if is_loopback(request.host) or request.api_key:
        return None
    where = f"binding {request.host} without an API key: anyone who can reach port {request.port}"
    fix = "set one with --api-key-file FILE or KVSTACK_API_KEY"
    return f"{where} {engine_spec(request.engine).exposed_routes} ({fix})"


def require_guard(python: str) -> None:
    """The engine's interpreter can import the middleware every vLLM kvstack starts loads."""
    from kvstack.engines.vllm import GUARD_MIDDLEWARE
    from kvstack.runtime.preflight import check_module_importable

    if os.path.abspath(python) == os.path.abspath(sys.executable):
        return  # this interpreter runs kvstack
    try:
        check_module_importable(python, "vllm")
    except MissingProgramError:
        return  # the launch preflight names what is missing
    module = GUARD_MIDDLEWARE.rpartition(".")[0]
    try:
        check_module_importable(python, module)
    except MissingProgramError as exc:
        raise MissingProgramError(
            f"the engine's interpreter {python} cannot import {module}, the middleware that keeps "
            "vLLM's control endpoints closed",
            hint=f"install kvstack there too ({python} -m pip install kvstack), or run kvstack with it",
        ) from exc


def refuse_keyed_sglang_router(request: ServeRequest) -> None:
    """vllm-router runs behind kvstack's guard and reaches its engines with the run's control token
    as the bearer (serving/router_front.py): vLLM's guard takes it in place of the key, SGLang, with
    an API key, takes nothing but that key on its client routes (utils/auth.py, NORMAL level)."""
    if request.router and request.api_key and not engine_spec(request.engine).takes_run_token_with_a_key:
        raise InputError(
            "--router with --engine sglang and an API key: the router reaches the engines with "
            "kvstack's run token, which SGLang refuses where it asks for the key",
            hint="drop --router (clients use each replica), drop the key on loopback, or use --engine vllm",
        )
