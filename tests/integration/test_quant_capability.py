"""kvstack's table of the oldest GPU each quantization runs on (planning/quantization.py) is the
installed vLLM's: each config class's own ``get_min_capability``, asked in the engine's Python."""

from __future__ import annotations

import json
import subprocess

from kvstack.planning.quantization import VLLM_MIN_CC
from tests.support.deps import require_engine_module

ASK = """
import json, sys
from vllm.model_executor.layers.quantization import get_quantization_config
out = {}
for name in json.loads(sys.argv[1]):
    cls = get_quantization_config(name)
    out[name] = [cls.get_min_capability(), cls.__name__]
print(json.dumps(out))
"""


def test_the_minimum_capabilities_are_vllms_own() -> None:
    python = require_engine_module("vllm")
    done = subprocess.run(
        [python, "-c", ASK, json.dumps(list(VLLM_MIN_CC))], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answered = json.loads(done.stdout.strip().splitlines()[-1])
    for name, ((major, minor), where) in VLLM_MIN_CC.items():
        vllm_cc, vllm_class = answered[name]
        assert vllm_cc == major * 10 + minor, (name, vllm_cc)
        assert where.endswith(vllm_class), (name, where, vllm_class)  # the cited class is the one asked
