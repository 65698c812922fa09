"""tune's knobs (kvstack/tune/knobs.py) against the installed connectors' own code: names, defaults,
and the values their parsers and validators refuse. Run by the interpreter that has lmcache and
vllm (KVSTACK_ENGINE_PYTHON), so that this process never imports them."""

from __future__ import annotations

import json
import subprocess

import pytest

from kvstack.tune.knobs import CONNECTORS
from tests.support.deps import require_engine_module

pytestmark = pytest.mark.integration

PROBE = r"""
import argparse, json, pathlib
import lmcache
from lmcache.v1.config import _CONFIG_DEFINITIONS as D
from lmcache.v1.multiprocess.config import MPServerConfig, add_mp_server_args
from lmcache.v1.distributed.config import add_storage_manager_args
from lmcache.v1.distributed.l2_adapters.fs_native_l2_adapter import FSNativeL2AdapterConfig
mp = add_mp_server_args(argparse.ArgumentParser())
sm = add_storage_manager_args(argparse.ArgumentParser())
def refused(value):
    try:
        FSNativeL2AdapterConfig.from_dict({"base_path": "/tmp/x", "max_capacity_gb": value})
    except ValueError as exc:
        return str(exc)
    return ""
site = pathlib.Path(lmcache.__file__).parent.parent
spec = (site / "vllm/v1/kv_offload/cpu/spec.py").read_text()
print(json.dumps({
    "chunk_size": D["chunk_size"]["default"],
    "max_local_cpu_size": D["max_local_cpu_size"]["default"],
    "min_retrieve_tokens": D["min_retrieve_tokens"]["default"],
    "mp_chunk_size": MPServerConfig.chunk_size,
    "mp_chunk_flag": mp.parse_args([]).chunk_size,
    "l1_size_gb": sm.parse_args([]).l1_size_gb,
    "l1_type": sm.parse_args(["--l1-size-gb", "1.5"]).l1_size_gb,
    "fs_native_negative": refused(-1),
    "fs_native_zero": refused(0),
    "store_threshold": 'extra_config.get("store_threshold", 0)' in spec,
}))
"""


def test_the_knobs_are_the_installed_connectors() -> None:
    py = require_engine_module("lmcache")
    out = subprocess.run([py, "-c", PROBE], capture_output=True, text=True, timeout=180, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    knob = {c.name: {k.name: k for k in c.knobs} for c in CONNECTORS.values()}
    assert knob["lmcache"]["chunk_size"].default == got["chunk_size"] == 256
    assert knob["lmcache"]["max_local_cpu_size"].default == got["max_local_cpu_size"]
    assert knob["lmcache"]["min_retrieve_tokens"].default == got["min_retrieve_tokens"] == 0
    assert knob["lmcache-mp"]["--chunk-size"].default == got["mp_chunk_size"] == got["mp_chunk_flag"]
    # --l1-size-gb has no default (required) and takes a fraction of a GB.
    assert knob["lmcache-mp"]["--l1-size-gb"].default is None and got["l1_size_gb"] is None
    assert got["l1_type"] == 1.5 and not knob["lmcache-mp"]["--l1-size-gb"].integer
    # fs_native refuses a negative max_capacity_gb and takes 0, as the knob's minimum says.
    assert knob["lmcache-mp"]["max_capacity_gb"].minimum == 0
    assert "max_capacity_gb must be a non-negative number" in got["fs_native_negative"]
    assert got["fs_native_zero"] == ""
    assert got["store_threshold"] and knob["native"]["store_threshold"].default == 0
