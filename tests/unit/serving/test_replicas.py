"""prepare with --replicas: N LaunchSpecs from one Plan (one fingerprint), own ports, dirs and GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvstack.errors import UnsupportedError
from kvstack.hardware.snapshot import HardwareSnapshot, load_snapshot
from kvstack.serving.prepare import Launch, prepare
from kvstack.serving.request import ServeRequest
from tests.support.deps import ROOT

HW = ROOT / "profiles" / "hardware"
LLAMA_8B_CONFIG = ROOT / "tests" / "fixtures" / "configs" / "Llama-3.1-8B.json"
API_KEY = "sk-replica-secret-1"
REDIS_PASSWORD = "hunter2pw"
REMOTE = f"redis://:{REDIS_PASSWORD}@127.0.0.1:6379/0"


def gpu_machine(tmp_path: Path) -> HardwareSnapshot:
    snap = load_snapshot(HW / "8x-h100.json")
    # The recorded NVMe RAID, placed where this test may point the cache: it gets a disk tier.
    snap.disks = [snap.disks[0].model_copy(update={"path": str(tmp_path), "mount": str(tmp_path)})]
    return snap


def model_dir(tmp_path: Path) -> Path:
    model = tmp_path / "llama-3.1-8b"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(LLAMA_8B_CONFIG.read_text())
    return model


def request(tmp_path: Path, **kw: object) -> ServeRequest:
    fields: dict[str, object] = {
        "model": str(model_dir(tmp_path)),
        "context": "128k",
        "users": 256,
        "kv_dtype": "auto",
        "offload": "lmcache",
        "cache_dir": tmp_path / "cache",
        "run_dir": tmp_path / "run",
        "port": 8000,
    }
    fields.update(kw)
    return ServeRequest(**fields)  # type: ignore[arg-type]


def gpu_replicas(tmp_path: Path, env: dict[str, str] | None = None, **kw: object) -> Launch:
    return prepare(request(tmp_path, **kw), gpu_machine(tmp_path), env=env or {})


def test_every_replica_shares_the_fingerprint_cache_and_remote_tier(tmp_path: Path) -> None:
    rs = gpu_replicas(tmp_path, replicas=2, remote=REMOTE, api_key=API_KEY)
    a, b = rs.replicas
    assert a.spec.fingerprint == b.spec.fingerprint != ""
    assert a.plan is b.plan is rs.plan
    assert a.spec.cache_dirs == b.spec.cache_dirs and "disk" in a.spec.cache_dirs
    assert rs.plan.tier("remote") is not None
    configs = [p.spec.files[0].content for p in rs.replicas]
    assert all(f"remote_url: {REMOTE}" in c for c in configs)
    # Each replica: its own port, run dir and config file.
    assert [p.spec.ports for p in rs.replicas] == [[8000], [8001]]
    assert [p.spec.base_url for p in rs.replicas] == ["http://127.0.0.1:8000", "http://127.0.0.1:8001"]
    assert [p.run_dir for p in rs.replicas] == [
        tmp_path / "run" / "replica-0",
        tmp_path / "run" / "replica-1",
    ]
    assert [p.spec.files[0].path for p in rs.replicas] == [
        str(tmp_path / "run" / f"replica-{i}" / "lmcache.yaml") for i in (0, 1)
    ]
    assert [p.request.port for p in rs.replicas] == [8000, 8001]
    assert rs.front_url == "http://127.0.0.1:8000" and rs.router is None


def test_each_replica_is_planned_for_its_share_of_the_machine(tmp_path: Path) -> None:
    rs = gpu_replicas(tmp_path, replicas=2)
    whole = prepare(request(tmp_path, users=128), gpu_machine(tmp_path))
    assert rs.plan.workload.users == 128  # 256 --users over 2 replicas
    assert rs.plan.parallel.tensor_parallel_size <= 4 < whole.plan.parallel.tensor_parallel_size
    disk = rs.plan.tier("disk")
    assert disk is not None
    free = gpu_machine(tmp_path).disks[0].free_bytes
    assert free is not None and 2 * disk.size_bytes <= 0.8 * free
    assert any(
        w.startswith("planned per replica: 2 replicas share this machine, each with 4 of 8 GPUs")
        for w in rs.plan.warnings
    )
    # GPUs are handed out in blocks of TP, none twice.
    tp = rs.plan.parallel.tensor_parallel_size
    devices = [p.spec.server.env["CUDA_VISIBLE_DEVICES"].split(",") for p in rs.replicas]
    assert devices == [[str(i) for i in range(tp)], [str(i) for i in range(tp, 2 * tp)]]
    assert all(
        f"GPUs {','.join(d)} (CUDA_VISIBLE_DEVICES)" in p.spec.notes
        for d, p in zip(devices, rs.replicas, strict=True)
    )


def test_inherited_cuda_visible_devices_are_the_ones_handed_out(tmp_path: Path) -> None:
    rs = gpu_replicas(tmp_path, env={"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, replicas=2, tp=2)
    assert [p.spec.server.env["CUDA_VISIBLE_DEVICES"] for p in rs.replicas] == ["4,5", "6,7"]


@pytest.mark.parametrize(
    ("kw", "message", "hint"),
    [
        (
            {"replicas": 3, "tp": 4},
            "--replicas 3 with --tp 4 needs 12 GPUs; 8 visible",
            "use --replicas 2 or less",
        ),
        ({"replicas": 9}, "--replicas 9 needs 9 GPUs; 8 visible", "use --replicas 8 or less"),
    ],
)
def test_more_gpus_than_visible_exit_2(
    tmp_path: Path, kw: dict[str, object], message: str, hint: str
) -> None:
    with pytest.raises(UnsupportedError) as info:
        gpu_replicas(tmp_path, **kw)
    assert info.value.exit_code == 2
    assert info.value.message == message and info.value.hint == hint


def test_lmcache_mp_helpers_get_the_layouts_ports(tmp_path: Path) -> None:
    rs = gpu_replicas(tmp_path, replicas=2, offload="lmcache-mp", router=True)
    # Router 8000, engines 8001-8002, router metrics 8003, MP servers 8004-8007.
    assert [p.spec.ports for p in rs.replicas] == [[8001, 8004, 8005], [8002, 8006, 8007]]
    for p, (port, http_port) in zip(rs.replicas, [(8004, 8005), (8006, 8007)], strict=True):
        helper = p.spec.helpers[0]
        assert helper.argv[helper.argv.index("--port") + 1] == str(port)
        assert helper.argv[helper.argv.index("--http-port") + 1] == str(http_port)
        assert helper.env["CUDA_VISIBLE_DEVICES"] == p.spec.server.env["CUDA_VISIBLE_DEVICES"]
        kv = json.loads(p.spec.server.argv[p.spec.server.argv.index("--kv-transfer-config") + 1])
        assert kv["kv_connector_extra_config"]["lmcache.mp.port"] == port
    assert rs.router is not None and rs.router.ports == [8000, 8003]


def test_router_argv_and_spec(tmp_path: Path) -> None:
    rs = gpu_replicas(tmp_path, replicas=2, router=True, host="0.0.0.0", api_key=API_KEY)
    router = rs.router
    assert router is not None
    py = rs.replicas[0].options.python
    assert router.server.argv == [
        py, "-m", "kvstack.serving.router_front",  # kvstack's guard in front, the router behind
        "--host", "0.0.0.0",
        "--port", "8000",
        "--",
        "--worker-urls", "http://127.0.0.1:8001", "http://127.0.0.1:8002",
        "--policy", "cache_aware",
        "--prometheus-host", "127.0.0.1",
        "--prometheus-port", "8003",
        "--worker-startup-check-interval", "1",
        # its prefix tree holds what one replica's pool and own offload tiers hold (4 characters a token)
        "--max-tree-size", str(4 * sum(t.tokens for t in rs.plan.cache.tiers if t.kind != "remote")),
    ]  # fmt: skip
    token = rs.replicas[0].options.control_token
    assert token and all(p.options.control_token == token for p in rs.replicas)  # one per launch
    assert API_KEY not in " ".join(router.server.argv) and token not in " ".join(router.server.argv)
    # The guard's key and token, in the environment (argv is every local user's to read).
    assert router.server.env == {"KVSTACK_CONTROL_TOKEN": token, "VLLM_API_KEY": API_KEY}
    assert router.server.ready_url == "http://127.0.0.1:8000/health"
    assert router.base_url == rs.front_url == "http://127.0.0.1:8000"
    assert router.served_model_name == rs.replicas[0].spec.served_model_name
    assert router.api_key_set and router.secrets == [API_KEY, token]
    assert router.metrics_urls == ["http://127.0.0.1:8003/metrics"]


def test_a_router_without_a_key_unsets_an_inherited_one(tmp_path: Path) -> None:
    rs = gpu_replicas(tmp_path, replicas=2, router=True)
    assert rs.router is not None and "VLLM_API_KEY" in rs.router.server.unset_env
    assert set(rs.router.server.env) == {"KVSTACK_CONTROL_TOKEN"} and not rs.router.api_key_set


def test_one_replica_behind_a_router(tmp_path: Path) -> None:
    rs = gpu_replicas(tmp_path, router=True)
    assert [p.spec.ports for p in rs.replicas] == [[8001]]
    assert "CUDA_VISIBLE_DEVICES" not in rs.replicas[0].spec.server.env  # one replica: every GPU
    assert not any(w.startswith("planned per replica") for w in rs.plan.warnings)
    assert rs.router is not None and rs.router.server.argv.count("--worker-urls") == 1


def test_dry_run_document_lists_every_replica_and_masks_secrets(tmp_path: Path) -> None:
    rs = gpu_replicas(tmp_path, replicas=2, router=True, remote=REMOTE, api_key=API_KEY)
    doc = rs.dry_run_document()
    text = json.dumps(doc)
    assert API_KEY not in text and REDIS_PASSWORD not in text
    first = doc["replicas"][0]
    for key in ("argv", "env", "files", "helpers", "ports", "base_url", "fingerprint"):
        assert doc[key] == first[key]  # the first replica at the top level, as for one engine
    assert [r["index"] for r in doc["replicas"]] == [0, 1]
    assert [r["run_dir"] for r in doc["replicas"]] == [str(tmp_path / "run" / f"replica-{i}") for i in (0, 1)]
    assert doc["router"]["argv"][:3] == [rs.replicas[0].options.python, "-m", "kvstack.serving.router_front"]
    assert doc["router"]["env"] == {"KVSTACK_CONTROL_TOKEN": "***", "VLLM_API_KEY": "***"}
    assert doc["port_layout"]["engines"] == [8001, 8002]
    assert doc["front_url"] == "http://127.0.0.1:8000"
    assert doc["plan"]["tensor_parallel_size"] == rs.plan.parallel.tensor_parallel_size


def test_cpu_demo_replicas(tmp_path: Path) -> None:
    snap = load_snapshot(HW / "no-gpu.json")
    req = ServeRequest(cache_dir=tmp_path / "cache", run_dir=tmp_path / "run", port=8100, replicas=2)
    rs = prepare(req, snap, env={"CUDA_VISIBLE_DEVICES": "0"})
    assert rs.plan.platform == "cpu"
    assert rs.replicas[0].spec.fingerprint == rs.replicas[1].spec.fingerprint
    for p in rs.replicas:
        assert "CUDA_VISIBLE_DEVICES" not in p.spec.server.env
        assert p.spec.server.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert [p.spec.base_url for p in rs.replicas] == ["http://127.0.0.1:8100", "http://127.0.0.1:8101"]


def test_the_canary_checks_every_replicas_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from kvstack.canary.runner import CanaryRunner
    from kvstack.serving.lifecycle import ServeEvents, watching

    launch = gpu_replicas(tmp_path, replicas=3)
    monkeypatch.setattr(CanaryRunner, "start", lambda self, *a, **k: None)  # no engine answers here
    said: list[str] = []
    group = SimpleNamespace(before_stop=lambda halt: None)
    with watching(launch, None, ServeEvents(message=said.append), group) as runner:  # type: ignore[arg-type]
        assert runner is not None
        targets = list(runner.targets.values())
    assert [t.base_url for t in targets] == [p.spec.base_url for p in launch.replicas]
    assert list(runner.targets) == [p.spec.base_url.split("//")[1] for p in launch.replicas]
    assert all({t.kind for t in target.tiers} == {"cpu", "disk"} for target in targets)
    assert any("within 1.00% of each of the 3 engines' prefill" in line for line in said)
