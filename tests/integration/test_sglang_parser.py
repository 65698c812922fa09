"""Every rendered SGLang argv through SGLang's own parser (sglang.srt.server_args.prepare_server_args).

SGLang cannot run on this CPU machine, but its parser can: scripts/test installs sglang without its
dependencies (plus ipython and traitlets, which server_args imports) into .sglang-parser/, and the
probe runs in a subprocess with that directory on PYTHONPATH, so neither this process nor the
project's venv imports SGLang. A missing parser skips naming it, and fails under CI.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvstack.engines.render import render
from kvstack.runtime.specs import LaunchSpec
from tests.integration.test_engine_parsers import engine_specs
from tests.support.deps import ROOT, engine_python, missing
from tests.unit.engines.cases import API_KEY, HUB_FACTS, SOFTWARE, make_options, make_plan
from tests.unit.planning.helpers import plan_for

pytestmark = pytest.mark.integration

PARSER_DIR = ROOT / ".sglang-parser"
PROBE = Path(__file__).resolve().parent / "sglang_probe.py"
TOKEN = "ctl-token-0123456789abcdef0123456789abcdef"


def sglang_specs(tmp: Path) -> dict[str, LaunchSpec]:
    specs = {n: s for n, s in engine_specs(tmp / "run", tmp / "cache").items() if s.engine == "sglang"}
    # The planner's own SGLang layout for an H100 with plenty of DRAM: HiCache with its file backend.
    # The snapshot's NVMe is /data: the cache root must be on it (rendering writes nothing there).
    plan = plan_for(
        "h100-sxm", "llama-3.1-8b", None, engine="sglang", context=131072, users=8, cache_root="/data/kv"
    )
    options = make_options(run_dir=str(tmp / "run" / "planned"), cache_root="/data/kv", api_key=API_KEY)
    specs["planned-h100-hicache-file"] = render(plan, options, SOFTWARE["sglang"], HUB_FACTS)
    # With a Redis tier the planner takes LMCache's cache server: HiCache has no remote tier.
    plan = plan_for(
        "h100-sxm", "llama-3.1-8b", None, engine="sglang", context=131072, users=8, cache_root="/data/kv",
        remote_url="redis://cache.internal:6379",
    )  # fmt: skip
    assert plan.transfer.connector == "lmcache-mp", plan.reasons["connector"]
    options = make_options(
        run_dir=str(tmp / "run" / "planned-mp"),
        cache_root="/data/kv",
        remote_url="redis://cache.internal:6379",
    )
    specs["planned-h100-lmcache-mp-remote"] = render(plan, options, SOFTWARE["sglang"], HUB_FACTS)
    # What serve renders on loopback: the run's control token as SGLang's admin key.
    for key in (None, API_KEY):
        options = make_options(
            run_dir=str(tmp / "run" / f"ctl-{bool(key)}"), api_key=key, control_token=TOKEN
        )
        specs[f"control-token-key-{bool(key)}"] = render(
            make_plan(engine="sglang", kv_dtype="fp8_e4m3"), options, SOFTWARE["sglang"], HUB_FACTS
        )
    for spec in specs.values():
        for f in [*spec.files, *spec.server.start_files]:
            Path(f.path).parent.mkdir(parents=True, exist_ok=True)
            Path(f.path).write_text(f.content, encoding="utf-8")
    return specs


def flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, LaunchSpec], dict[str, Any]]:
    if not (PARSER_DIR / "sglang" / "srt" / "server_args.py").is_file():
        missing("SGLang's parser in .sglang-parser/", "scripts/test installs it")
    tmp = tmp_path_factory.mktemp("sglang")
    specs = sglang_specs(tmp)
    job = {name: spec.server.argv[3:] for name, spec in specs.items()}
    for name, spec in specs.items():
        assert spec.server.argv[1:3] == ["-m", "sglang.launch_server"], name
    job["control-unknown-flag"] = ["--model-path", "m", "--hicache-sise", "10"]
    (tmp / "job.json").write_text(json.dumps(job), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(PARSER_DIR)}
    proc = subprocess.run(
        [engine_python(), str(PROBE), str(tmp / "job.json"), str(tmp / "result.json")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return specs, json.loads((tmp / "result.json").read_text(encoding="utf-8"))


def test_sglangs_parser_rejects_an_unknown_flag(parsed: tuple[dict[str, LaunchSpec], dict[str, Any]]) -> None:
    _specs, results = parsed
    assert results["control-unknown-flag"]["ok"] is False  # the probe does catch a bad command line


def test_every_sglang_argv_parses_with_sglangs_own_parser(
    parsed: tuple[dict[str, LaunchSpec], dict[str, Any]],
) -> None:
    specs, results = parsed
    assert {"planned-h100-hicache-file", "planned-h100-lmcache-mp-remote"} <= set(specs) and len(specs) >= 7
    assert "--enable-lmcache" in specs["planned-h100-lmcache-mp-remote"].server.argv
    for name, spec in specs.items():
        res, argv = results[name], spec.server.argv
        assert res["ok"], f"{name}: {res.get('error')}"
        assert res["model_path"] == flag(argv, "--model-path"), name
        assert res["port"] == int(flag(argv, "--port") or 0), name
        assert res["tp_size"] == int(flag(argv, "--tp-size") or 1), name
        assert res["kv_cache_dtype"] == (flag(argv, "--kv-cache-dtype") or "auto"), name
        assert res["context_length"] == int(flag(argv, "--context-length") or 0), name
        assert res["served_model_name"] == spec.served_model_name, name
        if "--enable-hierarchical-cache" in argv:
            assert res["enable_hierarchical_cache"] is True, name
            assert res["hicache_write_policy"] == flag(argv, "--hicache-write-policy"), name
            size = flag(argv, "--hicache-size")
            assert res["hicache_size"] == (int(size) if size else 0), name
            assert res["hicache_storage_backend"] == flag(argv, "--hicache-storage-backend"), name
        if "--enable-lmcache" in argv:
            assert res["enable_lmcache"] is True and not res["enable_hierarchical_cache"], name
            assert res["lmcache_config_file"] == flag(argv, "--lmcache-config-file"), name
        if "--config" in argv:
            # The key reaches SGLang through the YAML --config file, never argv.
            config = yaml.safe_load(Path(flag(argv, "--config") or "").read_text(encoding="utf-8"))
            assert config and set(config) <= {"api-key", "admin-api-key"}, name
            for key, value in config.items():
                assert res[key.replace("-", "_")] == value and f"--{key}" not in argv, name


def test_the_planned_hicache_layout_keeps_its_file_backend(
    parsed: tuple[dict[str, LaunchSpec], dict[str, Any]],
) -> None:
    specs, results = parsed
    res = results["planned-h100-hicache-file"]
    env = specs["planned-h100-hicache-file"].server.env
    assert res["hicache_storage_backend"] == "file" and res["hicache_size"] > 0
    storage = env["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"]
    assert storage.startswith("/data/kv/") and storage.endswith("/hicache-disk")


def test_the_control_token_locks_sglangs_admin_routes_by_its_own_auth(
    parsed: tuple[dict[str, LaunchSpec], dict[str, Any]],
) -> None:
    """SGLang's parser reads the token from the YAML as admin_api_key, and its own auth decision
    then refuses /flush_cache without it and with the API key, and allows it with the token."""
    _specs, results = parsed
    for key in (False, True):
        res = results[f"control-token-key-{key}"]
        assert res["ok"] and res["admin_api_key"] == TOKEN, res
        assert res["admin_route"] == {"none": False, "api_key": False, "admin_key": True}, res
    # Without a token or key (an SGLang kvstack did not start): every admin route is open.
    open_ = [r for n, r in results.items() if r.get("ok") and not r["api_key"] and not r["admin_api_key"]]
    assert open_ and all(r["admin_route"]["none"] for r in open_)
