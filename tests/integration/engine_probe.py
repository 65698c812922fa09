"""Check rendered launch specs with the engines' OWN parsers and loaders.

Run by the interpreter that has vllm/lmcache installed (KVSTACK_ENGINE_PYTHON). Never imported by
kvstack; the test process imports only its constants (OWNED_DESTS), and the engines are imported
inside the checks alone, so that the test process stays light:

    python engine_probe.py JOB.json RESULT.json

JOB: {"vllm_argv": {name: [args after the launcher]}, "lmcache_yaml": {name: path},
      "lmcache_server_argv": {name: [args after "server"]}}
RESULT: {section: {name: {"ok": bool, "error"?: str, ...facts the engine parsed...}}}
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import io
import json
import logging
import sys
import traceback
from typing import Any


def _parse(parser: Any, argv: list[str]) -> tuple[Any, str]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(argv), ""
    except SystemExit:
        return None, err.getvalue()[-3000:]


@functools.cache
def vllm_parser() -> Any:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:  # vLLM 0.32: entrypoints/launchers/cli_args.py; older: entrypoints/openai/cli_args.py
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser  # type: ignore[no-redef]
    return make_arg_parser(FlexibleArgumentParser())


def check_kv_transfer(kvt: Any) -> dict[str, Any]:
    """Resolve the connector class (and native offload spec/tier classes) the way vLLM will."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    out: dict[str, Any] = {
        "kv_connector": kvt.kv_connector,
        "kv_role": kvt.kv_role,
        "kv_connector_module_path": kvt.kv_connector_module_path,
        "kv_connector_extra_config": kvt.kv_connector_extra_config,
    }
    try:
        cls = KVConnectorFactory.get_connector_class(kvt)
        out["connector_class"] = cls.__name__
        out["connector_bases"] = [c.__name__ for c in cls.__mro__]
    except Exception as exc:  # a connector that cannot even be imported here (e.g. needs CUDA)
        out["connector_class_error"] = f"{type(exc).__name__}: {exc}"[:500]
    extra = kvt.kv_connector_extra_config or {}
    if kvt.kv_connector == "GatedLMCacheMPConnector":
        from kvstack.engines.lmcache_gate import gate_tokens

        out["gate_tokens"] = gate_tokens(extra)  # what the connector reads at its start
    if kvt.kv_connector == "OffloadingConnector":
        from vllm.v1.kv_offload.factory import OffloadingSpecFactory

        out["spec_class"] = OffloadingSpecFactory.get_spec_cls(extra).__name__
        tiers = []
        for tier in extra.get("secondary_tiers", []):
            from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

            cls = SecondaryTierFactory.get_tier_class(tier)
            params = inspect.signature(cls.__init__).parameters
            unknown = [k for k in tier if k != "type" and k not in params]
            tiers.append({"class": cls.__name__, "unknown_keys": unknown})
        out["secondary_tiers"] = tiers
    return out


def check_vllm_argv(argv: list[str]) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs

    try:
        from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args
    except ImportError:
        from vllm.entrypoints.openai.cli_args import validate_parsed_serve_args  # type: ignore[no-redef]

    args, error = _parse(vllm_parser(), argv)
    if args is None:
        return {"ok": False, "error": error}
    if getattr(args, "model_tag", None):
        args.model = args.model_tag  # what `vllm serve MODEL` does (vllm/entrypoints/cli/serve.py)
    validate_parsed_serve_args(args)
    engine = AsyncEngineArgs.from_cli_args(args)
    out: dict[str, Any] = {
        "ok": True,
        "model": engine.model,
        "host": args.host,
        "port": args.port,
        "served_model_name": args.served_model_name,
        "max_model_len": engine.max_model_len,
        "tensor_parallel_size": engine.tensor_parallel_size,
        "kv_cache_dtype": engine.kv_cache_dtype,
        "gpu_memory_utilization": engine.gpu_memory_utilization,
        "load_format": str(engine.load_format),
        "api_key": args.api_key,
        "disable_hybrid_kv_cache_manager": engine.disable_hybrid_kv_cache_manager,
        "enable_prefix_caching": engine.enable_prefix_caching,
    }
    if engine.kv_transfer_config is not None:
        out["kv_transfer"] = check_kv_transfer(engine.kv_transfer_config)
    return out


# The parser's destinations that kvstack sets itself (engines/owned_flags.py, engines/vllm.py).
OWNED_DESTS = (
    "host",
    "port",
    "uds",
    "api_key",
    "config",
    "kv_transfer_config",
    "kv_offloading_size",
    "kv_offloading_backend",
)
_BASE = ["--model", "m"]


def check_vllm_dests(argv: list[str]) -> dict[str, Any]:
    """Which of kvstack's own destinations ``argv`` sets, as vLLM's parser reads it."""
    parser = vllm_parser()
    base, _ = _parse(parser, _BASE)
    args, error = _parse(parser, [*_BASE, *argv])
    if args is None:
        return {"ok": False, "error": error}
    changed = [d for d in OWNED_DESTS if getattr(args, d, None) != getattr(base, d, None)]
    return {"ok": True, "owned_set": changed}


def list_vllm_options(_: Any) -> dict[str, Any]:
    """Every option string of vLLM's serve parser, with its destination."""
    parser = vllm_parser()
    options = {o: a.dest for a in parser._actions for o in a.option_strings}
    return {"ok": True, "options": options}


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            self.records.append(record.getMessage())


def check_lmcache_yaml(path: str) -> dict[str, Any]:
    from lmcache.v1.config import LMCacheEngineConfig

    collect = _Collect()
    # LMCache's loggers do not propagate (lmcache/logging.py): listen on the config modules.
    loggers = [logging.getLogger(n) for n in ("lmcache.v1.config_base", "lmcache.v1.config")]
    for lg in loggers:
        lg.addHandler(collect)
    try:
        config = LMCacheEngineConfig.from_file(path)
        config.validate()
    finally:
        for lg in loggers:
            lg.removeHandler(collect)
    loaded = {k: v for k, v in config.to_dict().items() if k in config._user_set_keys}
    return {"ok": True, "loaded": json.loads(json.dumps(loaded, default=str)), "warnings": collect.records}


def check_lmcache_server_argv(argv: list[str]) -> dict[str, Any]:
    import argparse

    from lmcache.cli.commands.server import ServerCommand
    from lmcache.v1.distributed.config import parse_args_to_config
    from lmcache.v1.multiprocess.config import (
        parse_args_to_http_frontend_config,
        parse_args_to_mp_server_config,
    )

    parser = argparse.ArgumentParser(prog="lmcache server")
    ServerCommand().add_arguments(parser)
    args, error = _parse(parser, argv)
    if args is None:
        return {"ok": False, "error": error}
    storage = parse_args_to_config(args)
    mp = parse_args_to_mp_server_config(args)
    http = parse_args_to_http_frontend_config(args)
    adapters = [
        {"class": type(a).__name__, **{k: v for k, v in vars(a).items() if isinstance(v, (str, int, float))}}
        for a in storage.l2_adapter_config.adapters
    ]
    return {
        "ok": True,
        "host": mp.host,
        "port": mp.port,
        "chunk_size": mp.chunk_size,
        "http_host": http.http_host if hasattr(http, "http_host") else None,
        "http_port": http.http_port if hasattr(http, "http_port") else None,
        "l1_size_gb": args.l1_size_gb,
        "eviction_policy": args.eviction_policy,
        "separate_object_groups": mp.separate_object_groups,
        "l2_adapters": adapters,
    }


CHECKS = {
    "vllm_argv": check_vllm_argv,
    "lmcache_yaml": check_lmcache_yaml,
    "lmcache_server_argv": check_lmcache_server_argv,
    "vllm_dests": check_vllm_dests,
    "vllm_options": list_vllm_options,
}


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as fh:
        job = json.load(fh)
    results: dict[str, dict[str, Any]] = {}
    for section, items in job.items():
        check = CHECKS[section]
        results[section] = {}
        for name, arg in items.items():
            try:
                results[section][name] = check(arg)
            except Exception as exc:
                results[section][name] = {
                    "ok": False,
                    "error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}",
                }
    with open(sys.argv[2], "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1, default=str)


if __name__ == "__main__":
    importlib.invalidate_caches()
    main()
