"""Where `kvstack top` finds what to watch: flags, or the launch.json/plan.json a serve run wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kvstack.errors import InputError, PathError
from kvstack.top.targets import from_run_dir, latest_run_dir, normalize_base, resolve_targets

PASSWORD = "s3cret-redis-pw"


def launch(port: int) -> dict[str, object]:
    """The keys of LaunchSpec.public() that serving.launch_files.record_run writes to launch.json
    (as `kvstack serve --dry-run --json` prints them for the demo plan here)."""
    return {
        "argv": ["vllm", "serve"],
        "env": {},
        "helpers": [{"name": "lmcache-server", "argv": ["lmcache", "server"]}],
        "ports": [port, port + 1, port + 2],
        "cache_dirs": {"disk": "/cache/demo/lmcache-mp-disk"},
        "metrics_urls": [f"http://127.0.0.1:{port}/metrics", f"http://127.0.0.1:{port + 2}/metrics"],
        "cache_server_url": f"http://127.0.0.1:{port + 2}",
        "tier_adapters": {"disk": "fs", "remote": "resp"},
        "served_model_name": "demo",
        "base_url": f"http://127.0.0.1:{port}",
        "engine": "vllm",
        "connector": "lmcache-mp",
    }


def plan(remote: str | None) -> dict[str, object]:
    tiers: list[dict[str, object]] = [{"kind": "cpu"}, {"kind": "cpu"}, {"kind": "disk"}]
    if remote:
        tiers.append({"kind": "remote", "url": remote})
    return {"tiers": tiers, "remote_url": remote}


def write_run(
    run_dir: Path, launch_doc: dict[str, object], plan_doc: dict[str, object] | None = None
) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "launch.json").write_text(json.dumps(launch_doc))
    if plan_doc is not None:
        (run_dir / "plan.json").write_text(json.dumps(plan_doc))
    return run_dir


def test_run_dir_gives_server_cache_server_disk_dir_and_offload_tiers(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", launch(8000), plan("redis://127.0.0.1:6379/0"))
    t = from_run_dir(run)
    assert t.servers == ("http://127.0.0.1:8000",)
    assert t.lmcache == ("http://127.0.0.1:8002",)
    assert t.disk_dir == "/cache/demo/lmcache-mp-disk"
    assert t.tiers == ("cpu", "disk", "remote")  # tiers[0], the engine's own pool, is not an offload tier
    assert t.adapters == {"disk": "fs", "remote": "resp"}
    assert t.remote == "redis://127.0.0.1:6379/0"  # no password: usable as it is
    assert t.notes == ()


def test_a_masked_remote_password_asks_for_remote_and_is_never_guessed(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", launch(8000), plan("redis://:***@127.0.0.1:6379/0"))
    t = from_run_dir(run)
    assert t.remote is None
    assert any("--remote" in n for n in t.notes)
    given = resolve_targets([], [], f"redis://:{PASSWORD}@127.0.0.1:6379/0", run)
    assert given.remote is not None and PASSWORD in given.remote
    assert given.remote_shown == "redis://:***@127.0.0.1:6379/0"
    assert PASSWORD not in repr(given) and given.notes == ()


def test_replica_run_lists_every_replica(tmp_path: Path) -> None:
    doc = {"replicas": [{"index": 0, **launch(8001)}, {"index": 1, **launch(8004)}], "front_url": "x"}
    t = from_run_dir(write_run(tmp_path / "run", doc))
    assert t.servers == ("http://127.0.0.1:8001", "http://127.0.0.1:8004")
    assert t.lmcache == ("http://127.0.0.1:8003", "http://127.0.0.1:8006")  # one cache server each
    assert t.cache_servers_of("http://127.0.0.1:8004") == ("http://127.0.0.1:8006",)


def test_one_shared_cache_server_serves_every_url() -> None:
    t = resolve_targets(["http://a:1", "http://b:2"], ["http://lm:3"], None, None)
    assert t.cache_servers_of("http://b:2") == ("http://lm:3",)
    t = resolve_targets(["http://a:1", "http://b:2", "http://c:4"], ["http://l:1", "http://l:2"], None, None)
    assert t.cache_servers_of("http://c:4") == ("http://l:1", "http://l:2")  # no pairing: all of them


def test_latest_run_is_the_newest_launch_json(tmp_path: Path) -> None:
    old = write_run(tmp_path / "20260101-000000-8000", launch(8000))
    new = write_run(tmp_path / "20260102-000000-9000", launch(9000))
    (tmp_path / "not-a-run").mkdir()
    os.utime(old / "launch.json", (1_000, 1_000))
    os.utime(new / "launch.json", (2_000, 2_000))
    assert latest_run_dir(tmp_path) == new
    t = resolve_targets([], [], None, None, runs_root=tmp_path)
    assert t.servers == ("http://127.0.0.1:9000",) and t.run_dir == str(new)


def test_flags_win_over_the_run_dir(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", launch(8000), plan(None))
    t = resolve_targets(["127.0.0.1:7000/"], ["http://127.0.0.1:7002/metrics"], None, run, Path("/d"))
    assert t.servers == ("http://127.0.0.1:7000",)
    assert t.lmcache == ("http://127.0.0.1:7002",)
    assert t.disk_dir == "/d"
    assert t.tiers == ("cpu", "disk")


def test_urls_alone_need_no_run_dir(tmp_path: Path) -> None:
    t = resolve_targets(
        ["http://a:1", "http://a:1", "http://b:2"], [], None, None, runs_root=tmp_path / "none"
    )
    assert t.servers == ("http://a:1", "http://b:2") and t.run_dir is None


def test_flags_alone_leave_the_tiers_to_what_the_cache_server_shows(tmp_path: Path) -> None:
    # --remote with --url/--lmcache: the DRAM and disk warnings must still apply.
    t = resolve_targets(
        ["http://a:1"], ["http://a:3"], "redis://127.0.0.1:6379/0", None, runs_root=tmp_path / "none"
    )
    assert t.tiers == () and t.remote == "redis://127.0.0.1:6379/0"


@pytest.mark.parametrize("bad", ["ftp://h:1", "http://h:notaport", "http://"])
def test_bad_urls_are_input_errors(bad: str) -> None:
    with pytest.raises(InputError):
        normalize_base(bad, "--url")


def test_missing_or_broken_run_dirs_are_path_errors(tmp_path: Path) -> None:
    with pytest.raises(PathError, match=r"no launch\.json"):
        from_run_dir(tmp_path)
    with pytest.raises(PathError, match="no kvstack serve run"):
        latest_run_dir(tmp_path)
    with pytest.raises(PathError):
        latest_run_dir(tmp_path / "missing")
    (tmp_path / "launch.json").write_text("{not json")
    with pytest.raises(PathError, match="not JSON"):
        from_run_dir(tmp_path)


def test_remote_must_be_a_redis_url_and_its_password_stays_out_of_errors() -> None:
    with pytest.raises(InputError) as err:
        resolve_targets(["http://a:1"], [], f"http://:{PASSWORD}@h:1", None)
    assert PASSWORD not in err.value.message
    with pytest.raises(InputError, match="lm://"):
        resolve_targets(["http://a:1"], [], "lm://h:1", None)
