"""`kvstack plan` end to end: the real CLI in a subprocess, with recorded --hardware snapshots."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kvstack.profiles import profiles_dir
from tests.support.cli_run import one_line_error, run_kvstack

HW = profiles_dir() / "hardware"
CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "configs"


def kvstack(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_kvstack("plan", *args, env=env)


def hw(name: str) -> str:
    return str(HW / f"{name}.json")


def test_feasible_plan_as_json_exits_0() -> None:
    proc = kvstack(
        "--model", "llama-3.1-70b", "--hardware", hw("8x-h100"), "--workload", "rag-long-doc", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert (plan["engine"], plan["connector"], plan["kv_cache_dtype"], plan["feasible"]) == (
        "vllm",
        "lmcache-mp",
        "fp8",
        True,
    )
    assert plan["tensor_parallel_size"] == 8 and plan["model"]["attention"] == "gqa"
    assert [t["kind"] for t in plan["tiers"]] == ["gpu", "cpu", "disk"]


def test_infeasible_plan_exits_1_and_still_prints_the_json() -> None:
    proc = kvstack("--model", "llama-3.1-70b", "--hardware", hw("h100-sxm"), "--json")
    assert proc.returncode == 1
    plan = json.loads(proc.stdout)
    assert plan["feasible"] is False and plan["errors"]
    assert "--tp 4" in plan["errors"][0] and "FP8 checkpoint" in plan["errors"][0]
    assert plan["model"]["name"] == "llama-3.1-70b" and plan["model"]["kv_bytes_per_token"] == 327680
    assert "Traceback" not in proc.stderr


def test_human_output_has_the_tier_table_reasons_and_warnings() -> None:
    proc = kvstack(
        "--model",
        "llama-3.1-8b",
        "--hardware",
        hw("sata-only"),
        "--workload",
        "rag-long-doc",
        "--users",
        "64",
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for needle in ("KV tiers", "gpu", "cpu", "fetch beats", "KV dtype", "fp8", "lmcache", "why", "cpu_tier:"):
        assert needle in out, needle
    assert "warning:" in out and "530 MB/s" in out


def test_infeasible_human_output_exits_1_with_the_error() -> None:
    proc = kvstack("--model", "deepseek-v3", "--hardware", hw("8x-h100"))
    assert proc.returncode == 1
    assert "NOT feasible" in proc.stdout and "error:" in proc.stdout


def test_no_gpu_snapshot_plans_for_cpu() -> None:
    proc = kvstack("--model", str(profiles_dir() / "demo"), "--hardware", hw("no-gpu"), "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    # LMCache is installed in that snapshot: its cache server serves the tiers on the CPU backend.
    assert (plan["platform"], plan["connector"], plan["tiers"][0]["kind"]) == ("cpu", "lmcache-mp", "cpu")
    assert [t["kind"] for t in plan["tiers"]] == ["cpu", "cpu", "disk"]
    assert any("no GPU visible" in w for w in plan["warnings"])


def test_context_suffixes_and_remote_redaction() -> None:
    proc = kvstack(
        "--model",
        "llama-3.1-8b",
        "--hardware",
        hw("h100-sxm"),
        "--context",
        "32k",
        "--remote",
        "redis://u:pa55-word@cache:6379/0",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["max_model_len"] == 32768
    assert plan["remote_url"] == "redis://u:***@cache:6379/0"
    assert "pa55-word" not in proc.stdout + proc.stderr


def test_cache_dir_picks_the_disk() -> None:
    common = (
        "--model",
        "llama-3.1-70b",
        "--hardware",
        hw("8x-h100"),
        "--workload",
        "rag-long-doc",
    )
    for cache_dir, measured in (("/raid/kv", "/raid"), ("/var/kv", "/")):
        proc = kvstack(*common, "--cache-dir", cache_dir, "--json")
        assert proc.returncode == 0, proc.stderr
        disk = json.loads(proc.stdout)["tiers"][-1]
        # The tier lives where the user asked; its figures come from the disk that holds it.
        assert (disk["kind"], disk["path"]) == ("disk", cache_dir)
        assert f" on {measured} (ext4, NVMe" in disk["reason"]


def test_retention_fills_dram_then_disk_and_no_disk_turns_it_off() -> None:
    common = ("--model", "llama-3.1-8b", "--hardware", hw("h100-sxm"), "--context", "128k", "--users", "8")
    proc = kvstack(*common, "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    gib = 1 << 30
    sizes = {t["kind"]: t["size_bytes"] for t in plan["tiers"]}
    # 8 x 8 GiB sessions at fp8; 10x that is kept for returning users: DRAM's pinned share, then NVMe.
    assert plan["concurrency"]["working_set_bytes"] == 64 * gib
    assert plan["concurrency"]["retention_target_bytes"] == 640 * gib
    assert sizes["disk"] == 640 * gib and 64 * gib < sizes["cpu"] < 640 * gib
    assert plan["ttft"]["tier_s"]["cpu"] < plan["ttft"]["tier_s"]["disk"] < plan["ttft"]["recompute_s"]
    human = kvstack(*common)
    assert "retention target" in human.stdout and "TTFT 128K prefix" in human.stdout
    absolute = json.loads(kvstack(*common, "--retain", "200GiB", "--json").stdout)
    assert absolute["concurrency"]["retention_target_bytes"] == 200 * gib
    assert {t["kind"]: t["size_bytes"] for t in absolute["tiers"]}["disk"] == 200 * gib
    off = json.loads(kvstack(*common, "--no-disk", "--json").stdout)
    assert [t["kind"] for t in off["tiers"]] == ["gpu", "cpu"]
    assert any("short" in w for w in off["warnings"])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--context", "-5"], "--context"),
        (["--context", "lots"], "--context must be a token count"),
        (["--context", "1m"], "above llama-3.1-8b's maximum"),
        (["--users", "0"], "--users must be at least 1"),
        (["--engine", "tgi"], "--engine must be one of vllm, sglang, not 'tgi'"),
        (["--kv-dtype", "int3"], "unknown --kv-dtype 'int3'"),
        (["--kv-dtype", "nvfp4"], "only on CC 10.x"),
        (["--tp", "2"], "--tp 2 needs 2 GPUs"),
        (
            ["--remote", "http://cache:6379"],
            "remote URL http://cache:6379 is malformed: scheme must be one of",
        ),
        # remote/url.py's rule, as serve and export read the URL: LMCache asserts a port.
        (["--remote", "redis://cache"], "remote URL redis://cache is malformed: host 'cache' has no port"),
        (["--workload", "nope"], "unknown workload 'nope'"),
        (["--offload", "sometimes"], "--offload must be one of auto, "),
        (["--retain", "0.5"], "keeps less than the working set"),
        (["--retain", "lots"], "--retain must be a multiple of the working set"),
        (["--engine", "sglang", "--offload", "native"], "does not work with sglang"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], needle: str) -> None:
    one_line_error(kvstack("--model", "llama-3.1-8b", "--hardware", hw("h100-sxm"), *args), needle)


def test_unknown_model_and_bad_model_directories(tmp_path: Path) -> None:
    one_line_error(kvstack("--model", "acme-unknown-7b", "--hardware", hw("h100-sxm")), "unknown model")
    # An id neither cached nor in the catalog, offline (tests/unit/conftest.py): the download command.
    one_line_error(
        kvstack("--model", "acme/unknown-7b", "--hardware", hw("h100-sxm")), "hf download acme/unknown-7b"
    )
    one_line_error(
        kvstack("--model", str(tmp_path / "missing"), "--hardware", hw("h100-sxm")), "does not exist"
    )
    one_line_error(kvstack("--model", str(tmp_path), "--hardware", hw("h100-sxm")), "has no config.json")
    (tmp_path / "config.json").write_text("{ nope")
    one_line_error(kvstack("--model", str(tmp_path), "--hardware", hw("h100-sxm")), "is not JSON")


def test_real_config_directory(tmp_path: Path) -> None:
    shutil.copy(CONFIGS / "DeepSeek-V3.json", tmp_path / "config.json")
    proc = kvstack("--model", str(tmp_path), "--hardware", hw("8x-h100"), "--json")
    plan = json.loads(proc.stdout)
    assert proc.returncode == 1  # 671B of FP8 weights do not fit 8 x 80 GB
    assert plan["model"]["attention"] == "mla" and plan["model"]["kv_bytes_per_token"] == 70272
    assert plan["model_path"] == str(tmp_path.resolve())


def test_bad_hardware_files(tmp_path: Path) -> None:
    bad = tmp_path / "hw.json"
    bad.write_text("{ not json")
    one_line_error(kvstack("--model", "llama-3.1-8b", "--hardware", str(bad)), "is not JSON")
    bad.write_text(json.dumps({"gpus": [{"index": "zero", "name": "x"}]}))
    one_line_error(kvstack("--model", "llama-3.1-8b", "--hardware", str(bad)), "gpus.0.index")
    one_line_error(
        kvstack("--model", "llama-3.1-8b", "--hardware", str(tmp_path / "none.json")), "does not exist"
    )


def test_missing_model_option_is_a_usage_error() -> None:
    proc = kvstack("--hardware", hw("h100-sxm"))
    assert proc.returncode == 2 and "--model" in proc.stderr and "Traceback" not in proc.stderr


def test_a_model_whose_every_layer_slides_shows_what_its_layers_keep(tmp_path: Path) -> None:
    # It was shown as "fp8 (0 B/token, full-attention layers; ...)".
    model_dir = tmp_path / "Mistral-7B-v0.1"
    model_dir.mkdir()
    shutil.copy(CONFIGS / "Mistral-7B-v0.1.json", model_dir / "config.json")
    proc = kvstack("--model", str(model_dir), "--hardware", hw("h100-sxm"), "--kv-dtype", "fp8")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if "KV dtype" in x)
    assert "0 B/token" not in line and "full-attention layers" not in line
    assert "64.0 KiB/token up to 4096 tokens a layer" in line and "32 sliding-window (4096)" in line


def test_an_attention_free_model_shows_its_state_not_a_kv_figure(tmp_path: Path) -> None:
    model_dir = tmp_path / "mamba"
    model_dir.mkdir()
    shutil.copy(CONFIGS / "edge" / "mamba.json", model_dir / "config.json")
    proc = kvstack("--model", str(model_dir), "--hardware", hw("no-gpu"), "--context", "2k")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if "KV dtype" in x)
    assert "0 B/token" not in line and "full-attention layers" not in line
    assert "no per-token KV, a fixed state per sequence; the model: 4 state-space" in line


def test_kv_figures_not_checked_with_the_engine_say_they_are_estimated() -> None:
    proc = kvstack("--model", "llama-3.1-8b", "--hardware", hw("h100-sxm"))
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if "KV dtype" in x)
    assert "estimated: kvstack's reader of config.json, not checked with the engine" in line
