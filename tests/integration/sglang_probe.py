"""Parse SGLang command lines with SGLang's own parser (sglang.srt.server_args.prepare_server_args).

Run by tests/integration/test_sglang_parser.py in a subprocess whose PYTHONPATH has SGLang (installed
without its dependencies by scripts/test) ahead of the engine's interpreter. Usage:
    sglang_probe.py JOB.json RESULT.json
JOB maps a case name to the arguments after `-m sglang.launch_server`; RESULT maps it to the parsed
fields, or to an error.
"""

from __future__ import annotations

import json
import sys

FIELDS = (
    "model_path",
    "host",
    "port",
    "tp_size",
    "kv_cache_dtype",
    "context_length",
    "page_size",
    "mem_fraction_static",
    "enable_hierarchical_cache",
    "hicache_size",
    "hicache_ratio",
    "hicache_write_policy",
    "hicache_storage_backend",
    "enable_lmcache",
    "lmcache_config_file",
    "served_model_name",
    "api_key",
    "admin_api_key",
    "revision",
)


def _admin(args: object) -> dict[str, bool]:
    """SGLang's own decision (utils/auth.py) for an admin route (/flush_cache) of this server:
    allowed without a bearer, with the API key, with the admin key."""
    from sglang.srt.utils.auth import AuthLevel, decide_request_auth

    api_key, admin_key = getattr(args, "api_key", None), getattr(args, "admin_api_key", None)

    def allowed(bearer: str | None) -> bool:
        return decide_request_auth(
            method="POST", path="/flush_cache", authorization_header=f"Bearer {bearer}" if bearer else None,
            api_key=api_key, admin_api_key=admin_key, auth_level=AuthLevel.ADMIN_OPTIONAL,
        ).allowed  # fmt: skip

    return {"none": allowed(None), "api_key": bool(api_key) and allowed(api_key),
            "admin_key": bool(admin_key) and allowed(admin_key)}  # fmt: skip


def main() -> None:
    job_path, result_path = sys.argv[1], sys.argv[2]
    with open(job_path, encoding="utf-8") as fh:
        job = json.load(fh)
    from sglang.srt.server_args import prepare_server_args

    result: dict[str, object] = {}
    for name, argv in job.items():
        try:
            args = prepare_server_args(argv)
        except SystemExit as exc:  # argparse's way of saying no
            result[name] = {"ok": False, "error": f"argparse exit {exc.code}"}
            continue
        except Exception as exc:
            result[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            continue
        result[name] = {
            "ok": True,
            **{f: getattr(args, f, None) for f in FIELDS},
            "admin_route": _admin(args),
        }
    with open(result_path, "w", encoding="utf-8") as fh:
        json.dump(result, fh, default=str)


if __name__ == "__main__":
    main()
