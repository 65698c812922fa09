from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from kvstack.hardware import software


def test_dist_version_reads_metadata() -> None:
    assert software.dist_version("pydantic") == ("pydantic", metadata.version("pydantic"))
    assert software.dist_version("no-such-dist-kvstack", "pydantic")[0] == "pydantic"
    assert software.dist_version("no-such-dist-kvstack") == (None, None)


def test_program_version_parses_real_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "fakeprog"
    script.write_text("#!/bin/sh\necho 'Redis server v=7.2.4 sha=00000000:0 malloc=jemalloc'\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert software.program_version("fakeprog", r"v=(\S+)") == ("7.2.4", None)
    version, why = software.program_version("fakeprog", r"fio-(\S+)")
    assert version is None and why is not None and "cannot read a version" in why
    missing = software.program_version("no-such-program-kvstack", r"(.*)")
    assert missing == (None, "no-such-program-kvstack is not installed")


def test_probe_software_matches_this_machine() -> None:
    info = software.probe_software()
    assert info.python == platform.python_version()
    dist, version = software.dist_version(*software.VLLM_DISTRIBUTIONS)
    assert (info.vllm_distribution, info.vllm) == (dist, version)
    for name in ("sglang", "lmcache", "nixl", "torch"):
        assert getattr(info, name) == software.dist_version(name)[1]
        assert (name in info.unknown) == (getattr(info, name) is None)
    if info.fio is not None:
        out = subprocess.run(["fio", "--version"], capture_output=True, text=True, check=True).stdout
        assert out.strip() == f"fio-{info.fio}"


def test_probe_software_imports_no_engine() -> None:
    code = (
        "import sys; from kvstack.hardware.software import probe_software; probe_software(); "
        "print(','.join(m for m in ('torch', 'vllm', 'sglang', 'lmcache', 'nixl') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


@pytest.mark.parametrize("attr", ["fio", "redis_server"])
def test_programs_report_version_or_reason(attr: str) -> None:
    info = software.probe_software()
    assert (getattr(info, attr) is None) == (attr in info.unknown)
