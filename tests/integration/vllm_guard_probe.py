"""Run by tests/integration/test_vllm_guard_app.py in the interpreter that has vLLM.

Builds vLLM's own OpenAI app (build_app, as its api_server does) from argv parsed by vLLM's own
parser, with VLLM_SERVER_DEV_MODE=1, VLLM_API_KEY and kvstack's --middleware, lists every route,
and asks each one, from a loopback and from a remote client, with and without the key. No engine
runs: a request the middlewares let through reaches a handler without an engine (a 5xx or 4xx
from vLLM), which is the point: it was let through. A 403 that vLLM answers itself (its
disabled scale-out routes) is recorded as 0, so that 401 and 403 mean kvstack's guard or vLLM's
key check.

With a TOKEN (kvstack's run token in KVSTACK_CONTROL_TOKEN), each route is also asked with the
token as the bearer, as kvstack's router passes it on ("<who>_token").

Usage: python vllm_guard_probe.py MODEL_DIR KEY RESULT.json [dev|plain] [TOKEN]
"""

from __future__ import annotations

import json
import os
import sys

MODEL, KEY, RESULT = sys.argv[1:4]
DEV = len(sys.argv) > 4 and sys.argv[4] == "dev"
if DEV:
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"
else:
    os.environ.pop("VLLM_SERVER_DEV_MODE", None)
os.environ["VLLM_API_KEY"] = KEY
TOKEN = sys.argv[5] if len(sys.argv) > 5 else None
if TOKEN:
    os.environ["KVSTACK_CONTROL_TOKEN"] = TOKEN

from starlette.routing import Mount  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402
from vllm.entrypoints.launchers.app import build_app  # noqa: E402
from vllm.entrypoints.launchers.cli_args import make_arg_parser  # noqa: E402
from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: E402

GUARD = "kvstack.engines.vllm_guard.ControlGuard"
args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", MODEL, "--middleware", GUARD])
app = build_app(args, supported_tasks=("generate",))

routes: dict[str, list[str]] = {}
for route in app.routes:
    methods = sorted(getattr(route, "methods", None) or (["GET"] if isinstance(route, Mount) else []))
    path = getattr(route, "path", "")
    routes[path] = sorted(set(routes.get(path, [])) | set(methods))

results: dict[str, dict[str, int]] = {}
for who, addr in (("local", ("127.0.0.1", 50000)), ("remote", ("203.0.113.7", 50000))):
    # Addressed as a client on this machine addresses it (the guard refuses control requests
    # whose Host is a domain name: DNS rebinding), not as Starlette's default "testserver".
    client = TestClient(app, base_url="http://127.0.0.1:8000", raise_server_exceptions=False, client=addr)
    for path, methods in routes.items():
        method = "POST" if "POST" in methods else (methods[0] if methods else "GET")
        url = path.replace("{response_id}", "resp-1")
        for bearer, name in ((None, "nokey"), (KEY, "key"), *([(TOKEN, "token")] if TOKEN else [])):
            headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
            resp = client.request(method, url, headers=headers, json={})
            # 403 from vLLM itself (its disabled scale-out routes) is told apart from the guard's.
            status = (
                0 if resp.status_code == 403 and "control endpoints" not in resp.text else resp.status_code
            )
            results.setdefault(path, {})[f"{who}_{name}"] = status

doc = {
    "routes": routes,
    "results": results,
    "middleware": [getattr(m.cls, "__name__", str(m.cls)) for m in app.user_middleware],
}
with open(RESULT, "w", encoding="utf-8") as fh:
    json.dump(doc, fh)
