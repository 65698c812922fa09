"""Compose projects: parse, the compose-spec structure, and consistency with the Plan.

data/compose-spec.json is compose-spec/compose-spec schema/compose-spec.json at 170098b (Apache-2.0).
It is checked with the ``jsonschema`` package where that is importable; the structural rules below
(checked by hand) run everywhere, because the project venv may not have jsonschema.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import yaml

from kvstack.errors import UnsupportedError
from kvstack.export import ExportOptions, export_plan
from kvstack.export.bundle import Bundle
from kvstack.export.deployment import PASSWORD_ENV
from kvstack.export.secrets import HASH_SEED
from kvstack.planning.schema import Plan
from kvstack.remote.source import REMOTE_URL_ENV
from kvstack.units import GIB
from tests.support.compose import container_argv, interpolate, read_dotenv
from tests.support.deps import require_module
from tests.unit.export.plans import make_plan

SCHEMA = Path(__file__).with_name("data") / "compose-spec.json"
PASSWORD = "hunter22%2Fsecret"  # percent-encoded in the URL, as a user must write "/"

CASES: dict[str, tuple[Plan, ExportOptions]] = {
    "lmcache-cpu-disk-tp2": (make_plan(), ExportOptions()),
    "lmcache-local-redis-password": (
        make_plan(remote_gib=32, remote_url="redis://:***@127.0.0.1:6379/0"),
        ExportOptions(remote_url=f"redis://:{PASSWORD}@127.0.0.1:6379/0"),
    ),
    "lmcache-external-redis": (
        make_plan(remote_gib=32, disk_gib_per_rank=None),
        ExportOptions(remote_url="rediss://cache.internal:6380/2"),
    ),
    "native-disk-local-model": (
        make_plan(connector="native", model_path="/srv/models/llama"),
        ExportOptions(),
    ),
    "native-cpu-only": (
        make_plan(connector="native", disk_gib_per_rank=None, tp=1),
        ExportOptions(port=9000),
    ),
    "none-on-cpu": (
        make_plan(connector="none", platform="cpu", cpu_gib_per_rank=None, disk_gib_per_rank=None, tp=1),
        ExportOptions(),
    ),
    "sglang-hicache-disk": (
        make_plan(engine="sglang", connector="hicache", kv_dtype="fp8_e4m3"),
        ExportOptions(),
    ),
}


def project(bundle: Bundle) -> dict[str, Any]:
    doc = yaml.safe_load(bundle.main.content)
    assert isinstance(doc, dict)
    return doc


def engine_of(plan: Plan, doc: dict[str, Any]) -> dict[str, Any]:
    svc: dict[str, Any] = doc["services"][plan.engine]
    return svc


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize("case", sorted(CASES))
def test_structure_follows_compose_spec(case: str) -> None:
    """The compose-spec rules these files touch, checked by hand (see the module docstring)."""
    plan, options = CASES[case]
    doc = project(export_plan("compose", plan, options))
    assert set(doc) <= {"name", "services", "volumes", "configs", "networks", "secrets"}
    assert re.fullmatch(r"[a-z0-9][a-z0-9_-]*", doc["name"])  # compose-spec: project name
    for name, svc in doc["services"].items():
        assert re.fullmatch(r"[a-zA-Z0-9._-]+", name)
        assert isinstance(svc["image"], str) and svc["image"]
        for key in ("command", "entrypoint"):
            if key in svc:
                assert all(isinstance(a, str) for a in svc[key])  # lists of strings, no numbers
        for port in svc.get("ports", []):
            assert re.fullmatch(r"(\d+\.\d+\.\d+\.\d+|\[[0-9a-f:]+\]):\d+:\d+", port)
        for env_value in svc.get("environment", {}).values():
            assert isinstance(env_value, str)
        for vol in svc.get("volumes", []):
            assert vol["type"] in ("bind", "volume") and vol["target"].startswith("/")
            if vol["type"] == "volume":
                assert vol["source"] in doc.get("volumes", {})
            else:
                assert vol["source"].startswith("/")
        for cfg in svc.get("configs", []):
            assert cfg["source"] in doc["configs"]
        for dep, cond in svc.get("depends_on", {}).items():
            assert dep in doc["services"] and cond["condition"] in ("service_started", "service_healthy")
            if cond["condition"] == "service_healthy":
                assert "healthcheck" in doc["services"][dep]
        if "healthcheck" in svc:
            assert svc["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL")
        if "shm_size" in svc:
            assert re.fullmatch(r"\d+(b|k|m|g|kb|mb|gb)", svc["shm_size"])
        for dev in svc.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", []):
            assert isinstance(dev["count"], int) and dev["capabilities"] == ["gpu"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_validates_against_the_compose_spec_schema(case: str) -> None:
    require_module("jsonschema", "pip install -e '.[test]'")
    import jsonschema

    plan, options = CASES[case]
    doc = project(export_plan("compose", plan, options))
    # Its "$schema" lacks the trailing "#" that jsonschema looks up by: name the draft.
    jsonschema.Draft7Validator(json.loads(SCHEMA.read_text(encoding="utf-8"))).validate(doc)


def test_schema_file_is_the_compose_spec() -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert schema["title"] == "Compose Specification" and "services" in schema["properties"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_engine_command_matches_the_plan(case: str) -> None:
    plan, options = CASES[case]
    doc = project(export_plan("compose", plan, options))
    engine = engine_of(plan, doc)
    argv = engine["command"]
    port = 8000 if plan.engine == "vllm" else 30000
    assert engine["ports"] == [f"{options.host}:{options.port}:{port}"]
    assert options.host == "127.0.0.1"  # loopback unless asked otherwise
    assert engine["environment"]["PYTHONHASHSEED"] == HASH_SEED  # replicas hash alike (docs/shared-tier.md)
    assert flag(argv, "--kv-cache-dtype") == plan.cache.kv_cache_dtype
    if plan.engine == "vllm":
        assert engine["entrypoint"][-1] == "serve"
        assert flag(argv, "--tensor-parallel-size") == str(plan.parallel.tensor_parallel_size)
        assert flag(argv, "--max-model-len") == str(plan.model.max_model_len)
        assert flag(argv, "--gpu-memory-utilization") == str(plan.cache.gpu_memory_utilization)
    else:
        assert flag(argv, "--tp-size") == str(plan.parallel.tensor_parallel_size)
        assert flag(argv, "--context-length") == str(plan.model.max_model_len)
    devices = engine.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    assert [d["count"] for d in devices] == (
        [plan.parallel.tensor_parallel_size] if plan.platform == "cuda" else []
    )
    cpu = plan.tier("cpu")
    shm = int(engine["shm_size"].removesuffix("gb")) * GIB
    assert shm >= (cpu.size_bytes if cpu else 0)
    disk = plan.tier("disk")
    binds = {v["target"]: v["source"] for v in engine["volumes"] if v["type"] == "bind"}
    if disk is not None:
        assert disk.path in binds.values()  # the disk tier's host directory is mounted


def test_lmcache_config_file_is_mounted_and_sized_per_rank() -> None:
    plan, options = CASES["lmcache-cpu-disk-tp2"]
    bundle = export_plan("compose", plan, options)
    doc = project(bundle)
    engine = engine_of(plan, doc)
    cfg_file = next(f for f in bundle.files if f.name == "lmcache.yaml")
    assert doc["configs"]["lmcache-config"]["file"] == "./lmcache.yaml"
    target = engine["configs"][0]["target"]
    assert engine["environment"]["LMCACHE_CONFIG_FILE"] == target
    cfg = yaml.safe_load(cfg_file.content)
    cpu, disk = plan.tier("cpu"), plan.tier("disk")
    assert cpu is not None and disk is not None
    assert cfg["max_local_cpu_size"] == cpu.size_bytes_per_rank // GIB
    assert cfg["max_local_disk_size"] == disk.size_bytes_per_rank // GIB
    assert cfg["local_cpu"] is True and cfg["chunk_size"] == plan.cache.chunk_size
    disk_target = next(v["target"] for v in engine["volumes"] if v.get("source") == disk.path)
    assert cfg["local_disk"] == f"file://{disk_target}/"
    kvt = json.loads(flag(engine["command"], "--kv-transfer-config"))
    assert kvt == {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    assert engine["image"].startswith("lmcache/vllm-openai:")  # vllm/vllm-openai has no LMCache


def test_local_redis_reads_its_password_from_a_secret_file_not_its_command() -> None:
    plan, options = CASES["lmcache-local-redis-password"]
    bundle = export_plan("compose", plan, options)
    doc = project(bundle)
    for f in bundle.files:
        if not f.secret:
            assert PASSWORD not in f.content and unquote(PASSWORD) not in f.content, f.name
    dotenv = next(f for f in bundle.files if f.name == ".env")
    assert dotenv.secret and dotenv.mode == 0o600
    values = read_dotenv(dotenv.content)
    # The engine's URL points at the bundled service, credentials as given; the exporter gets the
    # password decoded, as Redis compares it.
    assert values[REMOTE_URL_ENV] == f"redis://:{PASSWORD}@redis:6379/0"
    assert values[PASSWORD_ENV] == unquote(PASSWORD)
    engine = engine_of(plan, doc)
    assert interpolate(engine["environment"], values)["LMCACHE_REMOTE_URL"] == values[REMOTE_URL_ENV]
    assert engine["depends_on"] == {"redis": {"condition": "service_healthy"}}
    redis = doc["services"]["redis"]
    # Nothing in the container's argv or environment holds the password, even once interpolated.
    argv = interpolate(container_argv(redis), values)
    assert "--requirepass" not in argv and "environment" not in redis
    assert not [a for a in argv if unquote(PASSWORD) in a or PASSWORD in a]
    # It is in redis.conf (0600), mounted as a Compose secret and fed to redis-server as its stdin.
    conf = next(f for f in bundle.files if f.name == "redis.conf")
    assert conf.secret and conf.mode == 0o600
    assert doc["secrets"]["redis-conf"] == {"file": "./redis.conf"} and redis["secrets"] == ["redis-conf"]
    assert "< /run/secrets/redis-conf" in " ".join(redis["entrypoint"]) and redis["command"][-1] == "-"
    remote = plan.tier("remote")
    assert remote is not None
    assert flag(redis["command"], "--maxmemory") == str(remote.size_bytes)
    assert flag(redis["command"], "--maxmemory-policy") == "allkeys-lru"
    assert "ports" not in redis  # reachable by the engine only


def test_sglang_gets_its_key_from_a_config_file_not_its_command() -> None:
    plan, options = CASES["sglang-hicache-disk"]
    bundle = export_plan("compose", plan, options)
    engine = engine_of(plan, project(bundle))
    assert engine["environment"]["KVSTACK_API_KEY"] == "${KVSTACK_API_KEY:-}"
    assert engine["entrypoint"][:2] == ["python3", "-c"] and "--config" in engine["entrypoint"][2]
    assert "--api-key" not in engine["command"]
    (note,) = [n for n in bundle.notes if "KVSTACK_API_KEY" in n]
    assert (
        "--config" in note and "--api-key" not in note
    )  # the export says how, and no longer "add --api-key"


def test_external_redis_is_used_as_given_without_a_redis_service() -> None:
    plan, options = CASES["lmcache-external-redis"]
    bundle = export_plan("compose", plan, options)
    doc = project(bundle)
    # No Redis service of its own: the external one, watched by an exporter beside the monitoring.
    assert set(doc["services"]) == {"vllm", "kvstack-canary", "redis-exporter", "prometheus", "grafana"}
    assert doc["services"]["redis-exporter"]["environment"]["REDIS_ADDR"] == "rediss://cache.internal:6380"
    assert engine_of(plan, doc)["environment"]["LMCACHE_REMOTE_URL"] == "rediss://cache.internal:6380/2"
    assert not any(f.secret for f in bundle.files)


def test_native_with_disk_uses_the_tiering_spec() -> None:
    plan, options = CASES["native-disk-local-model"]
    doc = project(export_plan("compose", plan, options))
    engine = engine_of(plan, doc)
    kvt = json.loads(flag(engine["command"], "--kv-transfer-config"))
    cpu = plan.tier("cpu")
    assert cpu is not None
    extra = kvt["kv_connector_extra_config"]
    assert kvt["kv_connector"] == "OffloadingConnector" and extra["spec_name"] == "TieringOffloadingSpec"
    assert extra["cpu_bytes_to_use"] == cpu.size_bytes
    root = extra["secondary_tiers"][0]["root_dir"]
    assert any(v["target"] == root for v in engine["volumes"])
    model_mount = next(v for v in engine["volumes"] if v["source"] == "/srv/models/llama")
    assert model_mount["read_only"] is True and engine["command"][0] == model_mount["target"]


def test_sglang_hicache_sizes_in_decimal_gb_per_rank() -> None:
    plan, options = CASES["sglang-hicache-disk"]
    doc = project(export_plan("compose", plan, options))
    engine = engine_of(plan, doc)
    argv = engine["command"]
    cpu = plan.tier("cpu")
    assert cpu is not None
    assert "--enable-hierarchical-cache" in argv
    assert flag(argv, "--hicache-size") == str(cpu.size_bytes_per_rank // 10**9)
    storage_dir = engine["environment"]["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"]
    assert any(v["target"] == storage_dir for v in engine["volumes"])
    assert flag(argv, "--hicache-storage-backend") == "file" and flag(argv, "--page-size") == "64"


@pytest.mark.parametrize(
    ("engine", "connector", "remote"),
    [("vllm", "lmcache-mp", None), ("sglang", "lmcache", None), ("sglang", "hicache", "redis://c:6379")],
)
def test_refused_combinations(engine: str, connector: str, remote: str | None) -> None:
    with pytest.raises(UnsupportedError):
        export_plan(
            "compose", make_plan(engine=engine, connector=connector), ExportOptions(remote_url=remote)
        )


def test_a_quote_in_a_local_password_is_refused_not_mangled() -> None:
    plan = make_plan(remote_gib=4)
    with pytest.raises(UnsupportedError):
        export_plan("compose", plan, ExportOptions(remote_url="redis://:it's@127.0.0.1:6379"))
