"""`kvstack serve` on the demo model with a real vLLM: ready, validated, serving (the suite's shared
demo session, tests/e2e/conftest.py; test_tiers_lmcache.py stops it clean).

The session serves `--model kvstack/demo`: a Hugging Face id served from a Hugging Face cache,
offline. The demo model's files are laid out as huggingface_hub caches a download (blobs, refs/main,
snapshots/<commit>); the engine is given the id, not the snapshot's path, and finds the same
snapshot through the HF_HOME it inherits.
"""

from __future__ import annotations

import json
import stat
import subprocess

import httpx

from kvstack.engines.lmcache import L2_ADAPTERS
from tests.e2e.conftest import DEMO_REPO_ID, DemoHub, ServeSession, counter_delta, kvstack_cmd, wait_report
from tests.support.deps import ROOT


def test_serve_validates_and_answers(demo_server: ServeSession) -> None:
    report = wait_report(demo_server, 240)  # the validation pass runs right after readiness
    assert report["overall"] == "PASS", demo_server.output()[-3000:]
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["warm"]["verdict"] == "pass"
    assert steps["warm"]["speedup"] >= 1.5
    # The demo's default layout on this CPU machine: LMCache's cache server with DRAM and disk tiers
    # (and the shared session's Redis tier, test_tiers_lmcache.py's), each proven by its own counters
    # with a real engine.
    assert [s["name"] for s in report["steps"]] == [
        "cold",
        "warm",
        "tier:cpu",
        "tier:disk",
        "tier:remote",
        "diagnosis",
        "kv-size",
    ]
    # The engine's own "KV cache size" line: within 2% of the tokens the plan gave its pool.
    assert steps["kv-size"]["verdict"] == "pass", steps["kv-size"]
    assert counter_delta(steps["tier:cpu"], "lmcache_mp_lookup_hit_l1_tokens") > 0
    assert counter_delta(steps["tier:cpu"], "vllm:external_prefix_cache_hits") > 0
    assert counter_delta(steps["tier:disk"], "lmcache_mp_lookup_hit_l2_tokens") > 0
    disk_adapter = L2_ADAPTERS["disk"]
    assert (
        counter_delta(
            steps["tier:disk"], f'lmcache_mp_l2_load_completed_requests{{l2_name="{disk_adapter}"}}'
        )
        > 0
    )
    for name in ("tier:cpu", "tier:disk"):
        assert steps[name]["verdict"] == "pass" and steps[name]["speedup"] > 1.0, steps[name]
        # Measured vs predicted (the plan's bandwidths over the measured hit): shown for each tier,
        # and on this machine within the factor that would flag a tier.
        predicted = steps[name]["predicted_ttft_s"]
        assert predicted is not None and predicted > steps["warm"]["ttft_s"], steps[name]
        assert steps[name]["ttft_s"] < 3 * predicted, steps[name]
    assert "predicted" in demo_server.output()
    # The correctness gate: every token of every cached answer scored by a real recompute
    # (prompt_logprobs, nothing read from a cache), judged against the noise floor measured on the
    # cold answers of the same engine.
    noise = report["noise_floor"]
    assert noise["positions"] == 48 and noise["threshold"] is not None, noise
    for name in ("warm", "tier:cpu", "tier:disk"):
        checks = steps[name]["correctness"]
        assert len(checks) == 3 and all(c["verdict"] == "pass" and c["tokens"] == 16 for c in checks), checks
        assert all(c["typical"] <= c["threshold"] == noise["threshold"] for c in checks)
    assert "each tier >= 1.2x its recompute" in demo_server.output()
    launch = json.loads((demo_server.run_dir / "launch.json").read_text())
    assert "--load-format" not in launch["argv"]  # the weights are loaded as a real model's
    disk_dir = next(demo_server.cache_dir.glob("*/lmcache-mp-disk"))
    assert any(disk_dir.iterdir()), "the disk tier's objects are on disk"
    # A real completion through the server kvstack started.
    r = httpx.post(
        demo_server.base_url + "/v1/completions",
        json={"model": DEMO_REPO_ID, "prompt": "the cache", "max_tokens": 4},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    answer = r.json()
    assert isinstance(answer["choices"][0]["text"], str), answer
    assert answer["usage"]["completion_tokens"] >= 1, answer
    # What ran is recorded, private.
    assert stat.S_IMODE(demo_server.run_dir.stat().st_mode) == 0o700
    assert json.loads((demo_server.run_dir / "plan.json").read_text())["platform"] == "cpu"
    assert (demo_server.run_dir / "engine.log").stat().st_size > 0


def test_a_cached_hub_id_is_served_offline(demo_server: ServeSession, demo_hub: DemoHub) -> None:
    launch = json.loads((demo_server.run_dir / "launch.json").read_text())
    argv = launch["argv"]
    snapshot = demo_hub.snapshot
    assert DEMO_REPO_ID in argv and str(snapshot) not in " ".join(argv)  # the id, as vLLM users give it
    assert "--load-format" not in argv  # the snapshot holds the weights
    assert argv[argv.index("--served-model-name") + 1] == DEMO_REPO_ID
    plan = json.loads((demo_server.run_dir / "plan.json").read_text())
    assert (plan["model_path"], plan["model"]["source"]) == (DEMO_REPO_ID, str(snapshot))
    assert plan["model"]["checkpoint_bytes"] == (snapshot / "model.safetensors").stat().st_size
    # Offline, with kvstack/demo in no other cache: an engine that answered (and whose validation
    # passed every tier: test_serve_validates_and_answers) found this snapshot.
    models = httpx.get(demo_server.base_url + "/v1/models", timeout=30).json()
    assert [m["id"] for m in models["data"]] == [DEMO_REPO_ID], models


def test_validate_url_against_running_server(demo_server: ServeSession, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "report.json"
    res = subprocess.run(
        kvstack_cmd("validate", "--url", demo_server.base_url, "--json", "--out", str(out)),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["overall"] == "PASS"
    assert json.loads(res.stdout)["overall"] == "PASS"
