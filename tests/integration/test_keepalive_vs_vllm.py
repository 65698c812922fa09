"""kvstack's clients drop idle connections before the installed vLLM's API server would.

vLLM's uvicorn closes a connection idle for VLLM_HTTP_TIMEOUT_KEEP_ALIVE seconds; a client that
reuses one idle that long can send a request as the server closes it (tests/unit/clients/
test_streaming.py shows the failure). The default is read from the installed vLLM's envs.py.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from kvstack.clients.client import IDLE_KEEPALIVE_S
from tests.support.deps import require_engine_module


def vllm_keep_alive_default_s() -> float:
    py = require_engine_module("vllm")
    find = "import importlib.util; print(importlib.util.find_spec('vllm').submodule_search_locations[0])"
    where = subprocess.run(
        [py, "-c", find],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    text = (Path(where) / "envs.py").read_text()
    found = re.search(r'os\.environ\.get\(\s*"VLLM_HTTP_TIMEOUT_KEEP_ALIVE",\s*"(\d+(?:\.\d+)?)"', text)
    assert found, "vllm/envs.py no longer reads VLLM_HTTP_TIMEOUT_KEEP_ALIVE (its idle-connection limit)"
    return float(found.group(1))


def test_clients_reuse_only_connections_idle_well_below_vllms_keep_alive() -> None:
    server_s = vllm_keep_alive_default_s()
    # Half the server's limit: the client's clock starts when it has read the response, a little
    # after the server's, and a busy server's timer may fire late but never early.
    assert 0 < IDLE_KEEPALIVE_S <= server_s / 2, (IDLE_KEEPALIVE_S, server_s)
