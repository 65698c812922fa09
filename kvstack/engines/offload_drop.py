"""A rendered launch without its offload tiers: what serving restarts when the canary finds wrong KV.

The engine is rendered again without the connector: vLLM without ``--kv-transfer-config`` (and the
native offloading flags, and the hybrid-manager switch the connector needed: planning/carriage.py,
unless the engine's pool is pinned in blocks),
SGLang without HiCache's flags; LMCache's cache server is not started, and no LMCACHE_ variable
reaches the engine. The engine keeps its own prefix cache: a restart empties it, so nothing the
failed tier loaded survives. The tiers' directories are left as they are (serving/wrong_kv.py marks
them, so that no later serve reads them unchecked).
"""

from __future__ import annotations

from kvstack.connectors import spec_of
from kvstack.engines.sglang import HICACHE_FLAGS
from kvstack.engines.vllm import CONNECTOR_FLAGS
from kvstack.planning.carriage import MANAGER_OFF_FLAG
from kvstack.runtime.specs import LaunchSpec

FALLBACK_NOTE = (
    "the offload tiers were turned off while serving: the canary found an answer served from them "
    "that recompute does not give (the engine restarted without them)"
)
HICACHE_VALUED = ("--hicache-",)  # every --hicache-* flag takes a value
# SGLang with LMCache (engines/sglang.py render_sglang_lmcache_mp): the switch and its config file.
SGLANG_LMCACHE_FLAG, SGLANG_LMCACHE_CONFIG = "--enable-lmcache", "--lmcache-config-file"
LMCACHE_ENV_PREFIX = "LMCACHE_"
# A pool pinned in blocks: with vLLM's hybrid manager back on, a block is another size (a page across
# the layer groups), so the same count no longer holds the model's context. Gemma 3 270M's fallback
# with --num-gpu-blocks-override 40 died at start ("0.05 GiB KV cache is needed ... 0.01 GiB"): the
# manager stays off where the blocks are pinned, the layout the engine ran before.
BLOCKS_PINNED_FLAG = "--num-gpu-blocks-override"


def _without_flags(argv: list[str]) -> list[str]:
    pinned = any(a.split("=", 1)[0] == BLOCKS_PINNED_FLAG for a in argv)
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if name in CONNECTOR_FLAGS or name == SGLANG_LMCACHE_CONFIG or name.startswith(HICACHE_VALUED):
            i += 1 if "=" in arg else 2
            continue
        if name in HICACHE_FLAGS or name == SGLANG_LMCACHE_FLAG or (name == MANAGER_OFF_FLAG and not pinned):
            i += 1
            continue
        out.append(arg)
        i += 1
    return out


def without_offload(spec: LaunchSpec) -> LaunchSpec | None:
    """``spec`` serving from the engine's own cache only; None when it has no offload to drop."""
    if not spec_of(spec.connector).offloads:
        return None
    env = {k: v for k, v in spec.server.env.items() if not k.startswith(LMCACHE_ENV_PREFIX)}
    server = spec.server.with_command(argv=_without_flags(spec.server.argv), env=env)
    metrics = [spec.metrics_urls[0]] if spec.metrics_urls else []
    dropped = set(spec.server.argv) - set(server.argv)  # the config files only the connector read
    files = [f for f in spec.files if f.path not in dropped]
    out = spec.with_processes(server=server, helpers=[], note=FALLBACK_NOTE)
    out.files, out.connector, out.connector_version = files, "none", None
    out.cache_server_url, out.tier_adapters = None, {}
    out.metrics_urls, out.ports = metrics, [p for p in spec.ports[:1]]
    return out
