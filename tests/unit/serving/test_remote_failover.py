"""Serving's step for the remote store: messages passed on, the hung tier dropped once."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from kvstack.hardware.snapshot import RemoteInfo
from kvstack.runtime.specs import LaunchSpec
from kvstack.serving.launch_files import record, record_spec
from kvstack.serving.remote_failover import follow_remote
from kvstack.serving.remote_watch import RemoteWatch
from kvstack.top.targets import from_run_dir
from tests.unit.engines.cases import REDIS_URL, REDIS_URL_REDACTED
from tests.unit.engines.test_lmcache import helper_flag, mp
from tests.unit.serving.test_replicas import REMOTE, gpu_replicas

HUNG = RemoteInfo(
    url="redis://:***@h:1/0", reachable=False, error="cannot connect: Timeout reading from socket"
)


@dataclass
class FakeUnit:
    spec: LaunchSpec
    run_dir: Path = Path("/nonexistent-run-dir")
    restarted_with: list[LaunchSpec] = field(default_factory=list)

    def restart(self, ready_timeout_s: float) -> None:
        self.restarted_with.append(self.spec)


@dataclass
class FakeGroup:
    members: list[FakeUnit]


def _step(watch: RemoteWatch, group: FakeGroup) -> tuple[list[str], list[str]]:
    warned: list[str] = []
    said: list[str] = []
    follow_remote(watch, group, warned.append, said.append, 60)
    return warned, said


def test_a_hang_past_the_window_restarts_each_unit_without_redis_once(tmp_path: Path) -> None:
    spec = mp(cpu_gib=8, remote_gib=10, remote_url=REDIS_URL_REDACTED, options={"remote_url": REDIS_URL})
    assert spec.tier_adapters.get("remote") == "resp"
    record_spec(tmp_path, spec)  # what serve wrote at launch
    group = FakeGroup([FakeUnit(spec, tmp_path), FakeUnit(spec)])
    watch = RemoteWatch("redis://unused", grace_s=4)
    for t in (0.0, 2.0, 4.0):  # what the watch's thread does with each probe
        message, drop = watch.outage.observe(HUNG, t)
        if message:
            watch._messages.put(message)
        if drop:
            watch._drop.set()
    warned, said = _step(watch, group)
    assert len(warned) == 2 and "without the remote tier" in warned[1]
    assert said == ["serving again without the remote tier (2 engine(s) restarted)"]
    for unit in group.members:
        (restarted,) = unit.restarted_with
        assert [a for a in helper_flag(restarted, "--l2-adapter") if '"resp"' in a] == []
    # The run dir's record says what runs now: no Redis adapter, no remote tier, and why.
    launch = json.loads((tmp_path / "launch.json").read_text())
    assert '"resp"' not in json.dumps(launch["helpers"]) and "remote" not in launch["tier_adapters"]
    assert any("remote tier was dropped while serving" in n for n in launch["notes"])
    assert _step(watch, group) == ([], [])  # nothing more: no second restart
    assert all(len(u.restarted_with) == 1 for u in group.members)


def test_an_engine_without_a_resp_adapter_is_left_alone_and_says_why() -> None:
    group = FakeGroup([FakeUnit(mp(cpu_gib=8))])
    watch = RemoteWatch("redis://unused")
    watch._drop.set()
    warned, said = _step(watch, group)
    assert said == [] and warned == [
        "this engine's remote tier cannot be dropped while serving: requests wait for the store"
    ]
    assert group.members[0].restarted_with == []


def test_a_replica_runs_top_level_record_follows_the_drop(tmp_path: Path) -> None:
    # Two lmcache-mp replicas sharing Redis, recorded as serve records them: each replica's
    # launch.json and the whole launch's above them (the first replica's fields at the top level).
    launch = gpu_replicas(tmp_path, replicas=2, remote=REMOTE, offload="lmcache-mp")
    record(launch)
    top = launch.run_dir / "launch.json"
    assert json.dumps(json.loads(top.read_text())).count('\\"resp\\"') >= 3  # top level + 2 replicas
    group = FakeGroup([FakeUnit(p.spec, p.run_dir) for p in launch.replicas])
    watch = RemoteWatch("redis://unused")
    watch._drop.set()
    _, said = _step(watch, group)
    assert said == ["serving again without the remote tier (2 engine(s) restarted)"]
    doc = json.loads(top.read_text())
    assert '\\"resp\\"' not in json.dumps(doc) and "remote" not in doc["tier_adapters"]
    assert [r["index"] for r in doc["replicas"]] == [0, 1]
    assert [r["run_dir"] for r in doc["replicas"]] == [str(p.run_dir) for p in launch.replicas]
    assert doc["run_dir"] == str(launch.run_dir) and doc["front_url"] == launch.front_url
    # top reads what now runs: no remote adapter (a replica's own record says the same).
    assert "remote" not in from_run_dir(launch.run_dir).adapters
    for p in launch.replicas:
        assert "remote" not in json.loads((p.run_dir / "launch.json").read_text())["tier_adapters"]
