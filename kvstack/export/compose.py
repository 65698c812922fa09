"""A Compose project (compose-spec) for the Plan: the engine, Redis when the remote tier is local,
the disk tier as a bind mount, /dev/shm sized for the CPU tier, GPUs reserved, ports on loopback.

Secrets never enter compose.yaml, nor any container's command line (Compose puts ``command`` in the
process's argv and in ``docker inspect``):
- a remote URL that holds a credential (``user:pw@``, ``?password=``: redact.url_secrets) reaches
  the engine as ``LMCACHE_REMOTE_URL``, interpolated by Compose from ``.env`` (written 0600);
- the bundled Redis reads ``requirepass`` from ``redis.conf`` (0600), a Compose secret: a file
  secret is a bind mount that keeps the host file's owner and mode (Compose ignores uid/gid/mode
  for it), and the Redis image drops from root to its redis user (docker-library/redis
  docker-entrypoint.sh, gosu), so the file is opened by the entrypoint's root shell and handed to
  redis-server as its stdin, which it reads as configuration (``redis-server ... -``);
- vLLM reads its API key from VLLM_API_KEY; SGLang reads no key variable, only ``--config FILE``
  (sglang >= 0.5.23), so its container writes KVSTACK_API_KEY into a 0600 file and starts SGLang
  with ``--config`` that file (LAUNCH_SGLANG);
- the KV canary sidecar (export/canary.py) reads the same key variable, and the bearer token of its
  /metrics from the Compose secret that Compose makes from KVSTACK_METRICS_TOKEN in ``.env``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from kvstack.connectors import spec_of
from kvstack.connectors.engines import engine_spec
from kvstack.engines.sglang import MIN_SGLANG_CONFIG
from kvstack.errors import UnsupportedError
from kvstack.export import canary
from kvstack.export.bundle import Bundle, ExportFile, ExportOptions
from kvstack.export.deployment import (
    PASSWORD_ENV,
    canary_runs,
    deployment_name,
    engine_image,
    gib_ceil,
    lmcache_settings,
    local_model,
    remote,
    require_connector,
    sglang_args,
    shm_bytes,
    vllm_kv_args,
)
from kvstack.export.monitoring import compose_monitoring
from kvstack.export.secrets import HASH_SEED
from kvstack.planning.schema import Plan
from kvstack.remote.source import REMOTE_URL_ENV
from kvstack.remoteurl import RemoteURL

DISK_DIR = "/var/lib/kvstack/kv"
MODELS_DIR = "/models"
LMCACHE_CONFIG_PATH = "/etc/kvstack/lmcache.yaml"
HF_CACHE = "/root/.cache/huggingface"
REDIS_SERVICE = "redis"
REDIS_PORT = 6379
REDIS_CONF = "redis.conf"  # the file written beside compose.yaml, 0600
REDIS_CONF_SECRET = "redis-conf"  # its Compose secret: mounted read-only at /run/secrets/redis-conf
# The image's own entrypoint, run with redis.conf as stdin: it opens the file as root, then drops to
# the redis user, whose redis-server reads the still-open stdin ("-" as the last argument).
REDIS_ENTRYPOINT = [
    "sh",
    "-c",
    f'exec docker-entrypoint.sh "$$@" < /run/secrets/{REDIS_CONF_SECRET}',  # $$: Compose's literal $
    "redis-entrypoint",
]
API_KEY_ENV = "KVSTACK_API_KEY"  # SGLang's key, as the caller sets it (vLLM's is VLLM_API_KEY)
# SGLang's container entrypoint: KVSTACK_API_KEY (taken out of the environment) into a 0600 YAML
# file (JSON is YAML), then SGLang with "--config FILE" (sglang/srt/server_args.py reads its options
# from it). Without the variable SGLang starts without a key. No "$" in it (Compose interpolates).
LAUNCH_SGLANG = (
    "import json, os, sys, tempfile\n"
    "argv = [sys.executable, *sys.argv[1:]]\n"
    f"key = os.environ.pop({API_KEY_ENV!r}, '')\n"
    "if key:\n"
    "    fd, path = tempfile.mkstemp(prefix='sglang-auth-', suffix='.yaml')\n"
    "    with os.fdopen(fd, 'w') as fh:\n"
    "        json.dump({'api-key': key}, fh)\n"
    "    argv += ['--config', path]\n"
    "os.execv(sys.executable, argv)\n"
)


def _esc(value: str) -> str:
    """Compose interpolates ``$``: a literal one is written ``$$``."""
    return value.replace("$", "$$")


def redis_conf_value(value: str) -> str:
    """A redis.conf argument in double quotes, as redis reads it (sds.c sdssplitargs: \\, \\" and
    \\xHH escapes), so that any password is read back byte for byte."""
    out = []
    for byte in value.encode("utf-8"):
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\x{byte:02x}")
    return '"' + "".join(out) + '"'


def _redis_service(plan: Plan, password: str | None) -> tuple[dict[str, object], ExportFile | None]:
    """The bundled Redis, and the 0600 redis.conf that holds its password when it has one."""
    # KV keys have no TTL: without maxmemory and an allkeys-* policy Redis fills up and refuses writes.
    command = ["redis-server", "--port", str(REDIS_PORT), "--save", "", "--appendonly", "no"]
    command += ["--maxmemory-policy", "allkeys-lru"]
    tier = plan.tier("remote")
    if tier is not None:
        command += ["--maxmemory", str(tier.size_bytes)]
    service: dict[str, object] = {"image": "redis:7"}
    conf = None
    if password is not None:
        service["entrypoint"] = REDIS_ENTRYPOINT
        command.append("-")  # the rest of the configuration from stdin: redis.conf
        service["secrets"] = [REDIS_CONF_SECRET]
        conf = ExportFile(
            name=REDIS_CONF,
            content="# The bundled Redis's password (kept 0600; Compose mounts it as a secret)\n"
            f"requirepass {redis_conf_value(password)}\n",
            mode=0o600,
            secret=True,
        )
    service["command"] = command
    service["restart"] = "unless-stopped"
    service["healthcheck"] = {
        # Answering at all is health: with a password an unauthenticated PING gets NOAUTH, so the
        # check needs no copy of the password.
        "test": ["CMD-SHELL", "redis-cli ping | grep -qE '^(PONG|NOAUTH)'"],
        "interval": "5s",
        "timeout": "3s",
        "retries": 10,
    }
    return service, conf


def _engine_launch(
    plan: Plan, model: str, port: int, disk_dir: str | None, repo: str
) -> tuple[list[str], list[str], dict[str, str]]:
    """(entrypoint, command, environment) of the engine's container."""
    # The engine's own command line: the one place Compose is written per engine, as kvstack/engines
    # renders each engine's serve command (the two CLIs share no flag spelling).
    if plan.engine == "sglang":
        args, env = sglang_args(plan, disk_dir)
        # The entrypoint python3 -c LAUNCH_SGLANG runs these with sys.executable.
        return ["python3", "-c", LAUNCH_SGLANG], [
            "-m", "sglang.launch_server", "--model-path", model,
            "--host", "0.0.0.0", "--port", str(port), *args,
        ], env  # fmt: skip
    args = [
        model, "--host", "0.0.0.0", "--port", str(port),
        "--max-model-len", str(plan.model.max_model_len),
        "--tensor-parallel-size", str(plan.parallel.tensor_parallel_size),
        "--gpu-memory-utilization", str(plan.cache.gpu_memory_utilization),
        *vllm_kv_args(plan, disk_dir),
    ]  # fmt: skip
    # lmcache/vllm-openai keeps vllm in /opt/venv (production-stack deployment-vllm-multi.yaml).
    return ["/opt/venv/bin/vllm" if repo == "lmcache/vllm-openai" else "vllm", "serve"], args, {}


@dataclass
class _Project:
    """What render_compose gathers, part by part, into compose.yaml and the files beside it."""

    engine: dict[str, object] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    services: dict[str, object] = field(default_factory=dict)  # beside the engine's
    files: list[ExportFile] = field(default_factory=list)
    top_volumes: dict[str, object] = field(default_factory=dict)
    configs: dict[str, object] = field(default_factory=dict)
    secrets: dict[str, object] = field(default_factory=dict)
    dotenv: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def render_compose(plan: Plan, options: ExportOptions) -> Bundle:
    require_connector(
        plan,
        "compose",
        "use --offload lmcache or native (vLLM) or hicache (SGLang); for LMCache MP use --format systemd",
    )
    url = remote(options, plan)
    name = deployment_name(plan, options.name)
    repo, tag, notes = engine_image(plan, options)
    engine = engine_spec(plan.engine)
    port = engine.port
    disk = plan.tier("disk")
    disk_dir = DISK_DIR if disk is not None and disk.path else None
    project = _Project(notes=notes)
    model = _model_volumes(plan, disk_dir, project)
    entrypoint, command, env = _engine_launch(plan, model, port, disk_dir, repo)
    project.environment = {"HF_TOKEN": "${HF_TOKEN:-}", "PYTHONHASHSEED": HASH_SEED, **env}
    if engine.api_key_env:  # the engine reads it when --api-key is absent
        project.environment[engine.api_key_env] = f"${{{engine.api_key_env}:-}}"
    else:
        project.environment[API_KEY_ENV] = f"${{{API_KEY_ENV}:-}}"  # LAUNCH_SGLANG moves it into --config
    project.engine = _engine_service(plan, options, (repo, tag), entrypoint, command, port, project)
    if url is not None:
        _remote_tier(plan, url, project)
    if spec_of(plan.transfer.connector).lmcache_mode == "in-process":
        _lmcache_config(plan, disk_dir, url, project)
    project.engine["environment"] = project.environment
    services = {plan.engine: project.engine, **project.services}
    watched = canary_runs(plan)
    if watched:
        services[canary.JOB] = canary.compose_service(plan, plan.engine, port, options)
        # Made from the variable in .env by Compose (mode 0444 in the container, so that the canary's
        # and Prometheus's users both read it); unset, `docker compose up` refuses to start.
        project.secrets[canary.TOKEN_SECRET] = {"environment": canary.TOKEN_ENV}
        project.notes += canary.compose_notes(options, monitored=engine.dashboard)
    if engine.dashboard:
        _monitoring(plan, name, port, url, options, watched, services, project)
    else:
        project.notes.append(
            f"no dashboard for {engine.title}: its metric names cannot be checked against a real "
            f"{engine.title} here"
        )
    return _bundle(plan, options, name, services, project)


def _model_volumes(plan: Plan, disk_dir: str | None, project: _Project) -> str:
    """The engine's volumes (the model, the disk tier); returns the model as the engine names it."""
    volumes: list[object] = []
    if local_model(plan):
        model = f"{MODELS_DIR}/{plan.model.path.rstrip('/').rsplit('/', 1)[-1]}"
        volumes.append({"type": "bind", "source": _esc(plan.model.path), "target": model, "read_only": True})
    else:
        model = plan.model.path
        volumes.append({"type": "volume", "source": "hf-cache", "target": HF_CACHE})
        project.top_volumes["hf-cache"] = {}
    disk = plan.tier("disk")
    if disk_dir is not None and disk is not None and disk.path:
        volumes.append({"type": "bind", "source": _esc(disk.path), "target": disk_dir})
        project.notes.append(f"create the disk tier directory before starting: mkdir -p -m 700 {disk.path}")
    project.engine["volumes"] = volumes
    return model


def _engine_service(
    plan: Plan,
    options: ExportOptions,
    image: tuple[str, str],
    entrypoint: list[str],
    command: list[str],
    port: int,
    project: _Project,
) -> dict[str, object]:
    repo, tag = image
    engine: dict[str, object] = {"image": f"{repo}:{tag}", "entrypoint": entrypoint, "command": command}
    host = f"[{options.host}]" if ":" in options.host else options.host
    engine["ports"] = [f"{host}:{options.port}:{port}"]
    engine["shm_size"] = f"{gib_ceil(shm_bytes(plan))}gb"
    engine["ulimits"] = {"memlock": {"soft": -1, "hard": -1}}  # pinned host memory for the CPU tier
    engine["volumes"] = project.engine["volumes"]
    engine["restart"] = "unless-stopped"
    engine["healthcheck"] = {
        "test": [
            "CMD",
            "python3",
            "-c",
            f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/health')",
        ],
        "interval": "15s",
        "timeout": "5s",
        "retries": 5,
        "start_period": "20m",  # weights load and CUDA graphs are captured before /health answers
    }
    if plan.platform == "cuda":
        gpus = {"driver": "nvidia", "count": plan.parallel.tensor_parallel_size, "capabilities": ["gpu"]}
        engine["deploy"] = {"resources": {"reservations": {"devices": [gpus]}}}
    else:
        project.notes.append(f"the plan has no GPU: {repo} needs one; pass a CPU build with --image")
    return engine


def _remote_tier(plan: Plan, url: RemoteURL, project: _Project) -> None:
    """The Redis tier: a Redis service where it is local, and its URL and password kept in .env."""
    if url.is_loopback():
        # A loopback Redis runs in this project; the engine reaches it by service name.
        project.services[REDIS_SERVICE], conf = _redis_service(plan, url.auth_password)
        if conf is not None:
            project.files.append(conf)
            project.secrets[REDIS_CONF_SECRET] = {"file": f"./{REDIS_CONF}"}
        project.engine["depends_on"] = {REDIS_SERVICE: {"condition": "service_healthy"}}
        remote_value = url.with_endpoint(REDIS_SERVICE, REDIS_PORT)
    else:
        remote_value = url.raw
        project.notes.append(
            f"the engine uses the Redis at {url.redacted()}: it must be reachable from the container"
        )
    # LMCACHE_* variables override the config file (lmcache v1/config.py): the URL is passed
    # this way and kept out of lmcache.yaml; one that holds a credential is read from .env.
    if url.has_secret:
        project.dotenv.append(f"{REMOTE_URL_ENV}={_dotenv_quote(remote_value, 'the Redis URL')}")
        project.environment["LMCACHE_REMOTE_URL"] = f"${{{REMOTE_URL_ENV}:?set {REMOTE_URL_ENV} in .env}}"
    else:
        project.environment["LMCACHE_REMOTE_URL"] = _esc(remote_value)
    if url.auth_password is not None:
        # The exporter (redis_exporter) needs the password alone, decoded as Redis checks it.
        project.dotenv.append(f"{PASSWORD_ENV}={_dotenv_quote(url.auth_password, 'the Redis password')}")
    project.environment["LMCACHE_REMOTE_SERDE"] = "naive"


def _lmcache_config(plan: Plan, disk_dir: str | None, url: RemoteURL | None, project: _Project) -> None:
    settings = lmcache_settings(plan, disk_dir, None)
    header = "# LMCache config written by kvstack export (mounted at " + LMCACHE_CONFIG_PATH + ")\n"
    if url is not None:
        header += "# remote_url comes from LMCACHE_REMOTE_URL in compose.yaml\n"
    project.files.append(
        ExportFile(name="lmcache.yaml", content=header + yaml.safe_dump(settings, sort_keys=False))
    )
    project.configs["lmcache-config"] = {"file": "./lmcache.yaml"}
    project.engine["configs"] = [{"source": "lmcache-config", "target": LMCACHE_CONFIG_PATH}]
    project.environment["LMCACHE_CONFIG_FILE"] = LMCACHE_CONFIG_PATH


def _monitoring(
    plan: Plan,
    name: str,
    port: int,
    url: RemoteURL | None,
    options: ExportOptions,
    watched: bool,
    services: dict[str, object],
    project: _Project,
) -> None:
    redis_target = None
    if url is not None and url.scheme in ("redis", "rediss"):
        where = (REDIS_SERVICE, REDIS_PORT) if url.is_loopback() else (url.host, url.port)
        redis_target = f"{url.scheme}://{where[0]}:{where[1]}"
    extra, extra_configs, monitoring_files, monitoring_notes = compose_monitoring(
        plan,
        name,
        plan.engine,
        port,
        redis_target,
        url,
        f"{canary.JOB}:{options.metrics_port}" if watched else None,
    )
    services.update(extra)
    project.configs.update(extra_configs)
    project.files += monitoring_files
    project.notes += monitoring_notes


def _bundle(
    plan: Plan, options: ExportOptions, name: str, services: dict[str, object], project: _Project
) -> Bundle:
    doc: dict[str, object] = {"name": name, "services": services}
    if project.top_volumes:
        doc["volumes"] = project.top_volumes
    if project.configs:
        doc["configs"] = project.configs
    if project.secrets:
        doc["secrets"] = project.secrets
    header = (
        f"# Compose project written by kvstack export for {plan.model.geometry.name}\n"
        f"# engine {plan.engine}, connector {plan.transfer.connector}, KV dtype {plan.cache.kv_cache_dtype}, "
        f"TP {plan.parallel.tensor_parallel_size}\n# start: docker compose up -d\n"
    )
    main = ExportFile(name="compose.yaml", content=header + yaml.safe_dump(doc, sort_keys=False))
    out = [main, *project.files]
    if project.dotenv:
        out.append(
            ExportFile(
                name=".env",
                content="# Secrets for compose.yaml (kept 0600; Compose reads this file itself)\n"
                + "\n".join(project.dotenv)
                + "\n",
                mode=0o600,
                secret=True,
            )
        )
    key_env = engine_spec(plan.engine).api_key_env
    if key_env:
        key_how = f"set {key_env} (in .env or the environment)"
    else:
        key_how = (
            f"set {API_KEY_ENV} (in .env or the environment): the container writes it to a 0600 file "
            f"that SGLang reads with --config (SGLang reads no key variable; --config needs an image "
            f"with sglang >= {MIN_SGLANG_CONFIG}). SGLang logs its arguments, the key among them, when "
            "it starts: keep the container's log private"
        )
    published = f"{options.host}:{options.port}"
    project.notes.append(f"the API is published on {published}; {key_how} before exposing it")
    return Bundle(format="compose", files=out, notes=project.notes)


def _dotenv_quote(value: str, what: str) -> str:
    # Single quotes: Compose takes the value literally (no interpolation, no escapes).
    if "'" in value:
        raise UnsupportedError(
            f"{what} contains a single quote, which a Compose .env file cannot hold literally",
            hint="use a password without ' (e.g. generated with: openssl rand -hex 24)",
        )
    return f"'{value}'"
