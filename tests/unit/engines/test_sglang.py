"""SGLang: base flags, HiCache sizing and storage, LMCache MP, refused combinations."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from kvstack.engines.render import render
from kvstack.errors import UnsupportedError
from kvstack.runtime.specs import LaunchSpec
from tests.unit.engines.cases import (
    API_KEY,
    GIB,
    HUB_FACTS,
    REDIS_URL_REDACTED,
    SOFTWARE,
    make_options,
    make_plan,
)


def sglang(connector: str = "none", options: dict[str, Any] | None = None, **plan: Any) -> LaunchSpec:
    software = plan.pop("software", SOFTWARE["sglang"])
    return render(
        make_plan(engine="sglang", connector=connector, **plan),
        make_options(**(options or {})),
        software,
        HUB_FACTS,
    )


def flag(spec: LaunchSpec, name: str) -> str:
    argv = spec.server.argv
    return argv[argv.index(name) + 1]


def test_base_flags() -> None:
    spec = sglang(tp=2, kv_dtype="fp8_e4m3", max_model_len=65536)
    assert spec.server.argv[1:3] == ["-m", "sglang.launch_server"]
    assert flag(spec, "--tp-size") == "2" and flag(spec, "--kv-cache-dtype") == "fp8_e4m3"
    assert flag(spec, "--context-length") == "65536" and flag(spec, "--page-size") == "64"
    assert flag(spec, "--mem-fraction-static") == "0.9"
    assert {"--enable-metrics", "--enable-cache-report"} <= set(spec.server.argv)
    assert spec.reset_cache_path == "/flush_cache"


def test_api_key_reaches_sglang_in_a_private_file_not_argv() -> None:
    spec = sglang(options={"api_key": API_KEY})
    assert "--api-key" not in spec.server.argv and API_KEY not in " ".join(spec.server.argv)
    (auth,) = spec.server.start_files  # written before SGLang starts, removed once it is ready
    assert spec.files == []
    assert flag(spec, "--config") == auth.path == "/var/lib/kvstack/runs/r1/sglang-auth.yaml"
    assert yaml.safe_load(auth.content) == {"api-key": API_KEY} and auth.mode == 0o600
    assert API_KEY not in str(spec.public())
    assert spec.public()["start_files"] == [{"path": auth.path, "content": "***", "mode": "0o600"}]


@pytest.mark.parametrize("key", ["it's-a-key-1234", "k" * 60 + " " + "k" * 60, "clé-secrète-1234"])
def test_a_key_yaml_would_respell_is_masked_in_every_printed_form(key: str) -> None:
    # YAML quotes, folds or escapes such keys: the file's text no longer holds the key verbatim.
    spec = sglang(options={"api_key": key, "host": "0.0.0.0"})
    (auth,) = spec.server.start_files
    assert yaml.safe_load(auth.content)["api-key"] == key
    printed = json.dumps(spec.public())
    assert key not in printed and "sk" not in printed.split("start_files")[1][:80]
    assert auth.content not in printed


def test_hicache_size_is_whole_decimal_gb_per_rank() -> None:
    spec = sglang("hicache", tp=2, cpu_gib=64)
    assert "--enable-hierarchical-cache" in spec.server.argv
    assert flag(spec, "--hicache-size") == str(64 * GIB // 10**9)  # 68: SGLang's GB is 1e9 bytes
    assert flag(spec, "--hicache-write-policy") == "write_through"
    assert "--hicache-storage-backend" not in spec.server.argv


def test_small_cpu_tier_falls_back_to_a_ratio_above_one() -> None:
    spec = sglang("hicache", gpu_gib=0.25, cpu_gib=0.75)
    assert flag(spec, "--hicache-ratio") == "3"
    with pytest.raises(UnsupportedError, match="cannot size a host pool"):
        sglang("hicache", gpu_gib=0.5, cpu_gib=0.5)


def test_hicache_file_storage_directory_and_cap() -> None:
    spec = sglang("hicache", tp=2, cpu_gib=64, disk_gib=300)
    assert flag(spec, "--hicache-storage-backend") == "file"
    env = spec.server.env
    assert env["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] == spec.cache_dirs["disk"]
    assert env["SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE"] == str(300 * GIB)  # per rank: files per rank


def test_mla_models_cap_the_shared_files_at_the_total() -> None:
    spec = sglang("hicache", model="deepseek", tp=8, cpu_gib=100, disk_gib=200)
    assert spec.server.env["SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE"] == str(8 * 200 * GIB)


def test_hicache_refusals() -> None:
    with pytest.raises(UnsupportedError, match="--disable-radix-cache"):
        sglang("hicache", cpu_gib=8, options={"extra_args": ["--disable-radix-cache"]})
    with pytest.raises(UnsupportedError, match="no Redis storage backend"):
        sglang("hicache", cpu_gib=8, remote_gib=10, remote_url=REDIS_URL_REDACTED)
    with pytest.raises(UnsupportedError, match="needs a host"):
        sglang("hicache", disk_gib=100)
    with pytest.raises(UnsupportedError, match="bypasses kvstack's sizing") as err:
        sglang(options={"extra_args": ["--enable-hierarchical-cache"]})
    assert err.value.hint == "use --offload hicache instead"


def test_lmcache_in_process_is_refused_for_sglang() -> None:
    with pytest.raises(UnsupportedError, match="only in multi-process mode") as err:
        sglang("lmcache", cpu_gib=8)
    assert err.value.hint == "use --offload lmcache-mp with --engine sglang"


def test_lmcache_mp_config_file_and_helper() -> None:
    spec = sglang("lmcache-mp", cpu_gib=16, options={"port": 30000})
    path = flag(spec, "--lmcache-config-file")
    assert "--enable-lmcache" in spec.server.argv and spec.server.unset_env_prefixes == ["LMCACHE_"]
    (f,) = spec.files
    assert f.path == path and yaml.safe_load(f.content) == {"mp_host": "127.0.0.1", "mp_port": 30001}
    assert spec.helpers[0].name == "lmcache-server" and spec.ports == [30000, 30001, 30002]


def test_lmcache_mp_refusals() -> None:
    with pytest.raises(UnsupportedError, match="together with --enable-hierarchical-cache"):
        sglang("lmcache-mp", cpu_gib=8, options={"extra_args": ["--enable-hicache"]})
    old = SOFTWARE["sglang"].model_copy(update={"sglang": "0.5.22"})
    with pytest.raises(UnsupportedError, match=r"needs sglang >= 0\.5\.23, but sglang 0\.5\.22"):
        sglang("lmcache-mp", cpu_gib=8, software=old)


def test_a_hub_revision_reaches_sglang() -> None:
    plan = make_plan(engine="sglang")
    plan.model = plan.model.at_revision("v1.1")
    spec = render(
        plan,
        make_options(),
        SOFTWARE["sglang"],
        HUB_FACTS,
    )
    argv = spec.server.argv
    assert argv[argv.index("--model-path") + 1] == "meta-llama/Llama-3.1-8B-Instruct"
    assert argv[argv.index("--revision") + 1] == "v1.1"


def test_the_retention_target_gives_hicache_its_file_backend_on_a_big_dram_machine() -> None:
    """8 users at 128K on an H100 with 224 GiB of DRAM: the working set fits DRAM, the retention
    target (10x) does not, so HiCache gets the NVMe file backend sized to the target."""
    from tests.unit.planning.helpers import plan_for

    plan = plan_for(
        "h100-sxm", "llama-3.1-8b", None, engine="sglang", context=131072, users=8, cache_root="/data/kv"
    )
    disk = plan.tier("disk")
    assert plan.transfer.connector == "hicache" and disk is not None and disk.path == "/data/kv"
    assert plan.concurrency is not None and disk.size_bytes == plan.concurrency.retention_target_bytes
    spec = render(plan, make_options(), SOFTWARE["sglang"], HUB_FACTS)
    assert flag(spec, "--hicache-storage-backend") == "file"
    env = spec.server.env
    assert env["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"].startswith("/data/kv/")
    assert env["SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE"] == str(disk.size_bytes_per_rank)
