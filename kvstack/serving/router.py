"""vLLM's own load balancer (the ``vllm-router`` package) in front of the replicas.

Flags checked against vllm-router 0.1.17 (``vllm_router/router_args.py``, ``vllm-router --help``):
``--worker-urls`` (nargs *), ``--policy cache_aware`` (a prefix tree of request text per
worker: a repeated prefix goes back to the replica that holds its KV, until the load is out
of balance), ``--prometheus-port`` (its CLI default is 29000 and it always binds it, so
kvstack gives it a port of the layout), ``--worker-startup-check-interval`` (default 30 s: a
first health check that misses would cost half a minute). The router forwards the client's
headers, ``Authorization`` included, to the workers, which check it; its own ``--api-key`` is
what it sends to workers on its own calls. It answers ``GET /health`` once its workers are
healthy and proxies ``/v1/*``; its admin routes (``/add_worker``, ``/remove_worker``,
``/flush_cache``, ...) have no authentication, so kvstack runs it behind its guard
(serving/router_front.py): the admin routes answer only the run's control token, the OpenAI
routes the user's key, and the router's own port only the token.
"""

from __future__ import annotations

from importlib import metadata

from kvstack.engines.vllm_guard import KEY_ENV
from kvstack.errors import MissingProgramError
from kvstack.names import CONTROL_ENV
from kvstack.netaddr import client_host
from kvstack.planning.schema import Plan
from kvstack.runtime.preflight import check_module_importable
from kvstack.runtime.specs import LaunchSpec, ProcessSpec
from kvstack.serving.ports import PortLayout

ROUTER_PACKAGE = "vllm-router"
FRONT_MODULE = "kvstack.serving.router_front"  # the router behind kvstack's guard
ROUTER_POLICY = "cache_aware"
ROUTER_METRICS_HOST = "127.0.0.1"
# The cache-aware policy keeps, per worker, a prefix tree of request text within --max-tree-size
# characters (default 33,554,432, about 8.4M tokens): a worker whose tiers hold more than that is
# forgotten by the router while it could still serve the prefix from them. The tree is sized from
# the plan's per-replica tiers (the engine's pool and its own offload tiers; a shared remote tier is
# every worker's) at this many characters per token (typical BPE on English text: an estimate).
CHARS_PER_TOKEN = 4


def router_version() -> str | None:
    try:
        return metadata.version(ROUTER_PACKAGE)
    except metadata.PackageNotFoundError:
        return None


def render_router(
    layout: PortLayout,
    *,
    host: str,
    python: str,
    worker_urls: list[str],
    served_model_name: str,
    api_key: str | None = None,
    control_token: str | None = None,
    tree_tokens: int | None = None,
) -> LaunchSpec:
    """The router as a LaunchSpec of its own (a server, no helpers), supervised like an engine:
    kvstack's guard on ``--host``/``--port``, the router itself on loopback behind it."""
    assert layout.router_port is not None and layout.router_metrics_port is not None
    base_url = f"http://{client_host(host)}:{layout.router_port}"
    argv = [
        python, "-m", FRONT_MODULE,
        "--host", host,
        "--port", str(layout.router_port),
        "--",
        "--worker-urls", *worker_urls,
        "--policy", ROUTER_POLICY,
        "--prometheus-host", ROUTER_METRICS_HOST,
        "--prometheus-port", str(layout.router_metrics_port),
        "--worker-startup-check-interval", "1",
    ]  # fmt: skip
    notes: list[str] = []
    if tree_tokens:
        argv += ["--max-tree-size", str(tree_tokens * CHARS_PER_TOKEN)]
        notes.append(
            f"the router remembers {tree_tokens:,} tokens of prefixes per replica (--max-tree-size "
            f"{tree_tokens * CHARS_PER_TOKEN:,} characters at ~{CHARS_PER_TOKEN} per token): what each "
            "replica's tiers hold"
        )
    # The environment, never argv: the guard's token and key (engines/vllm_guard.py reads them).
    env: dict[str, str] = {}
    unset = ["KVSTACK_API_KEY"]
    if control_token:
        env[CONTROL_ENV] = control_token
    if api_key:
        env[KEY_ENV] = api_key
    else:
        unset.append(KEY_ENV)  # an inherited key would lock clients, and kvstack, out
    server = ProcessSpec(name="router", argv=argv, env=env, unset_env=unset, ready_url=f"{base_url}/health")
    return LaunchSpec(
        engine="vllm-router",
        connector="none",
        engine_version=router_version(),
        server=server,
        ports=[layout.router_port, layout.router_metrics_port],
        base_url=base_url,
        served_model_name=served_model_name,
        api_key_set=api_key is not None,
        metrics_urls=[f"http://{ROUTER_METRICS_HOST}:{layout.router_metrics_port}/metrics"],
        notes=[f"{ROUTER_POLICY} routing over {len(worker_urls)} replicas: {', '.join(worker_urls)}", *notes],
        secrets=[s for s in (api_key, control_token) if s],
    )


def replica_tree_tokens(plan: Plan) -> int:
    """The KV tokens one replica holds: its engine's pool and its own offload tiers (not the remote)."""
    return sum(t.tokens for t in plan.cache.tiers if t.kind != "remote")


def require_router(python: str) -> None:
    """Exit 2 with the install command when ``python`` cannot import vllm-router."""
    try:
        check_module_importable(python, "vllm_router", ROUTER_PACKAGE)
    except MissingProgramError as exc:
        if "is not installed" not in exc.message:
            raise  # the interpreter itself is missing or broken: that error says so
        raise MissingProgramError(
            f"--router needs the {ROUTER_PACKAGE} package, which is not installed for {python}",
            hint=f"install it: {python} -m pip install {ROUTER_PACKAGE}, or drop --router",
        ) from exc
