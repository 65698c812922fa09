"""No exported command line holds a credential of the remote URL, in any format: the commands as the
container, pod or unit gets them (Compose's .env interpolated, systemd's ExecStart split), checked
the way tests/e2e/test_serve_fault_stack.py checks every /proc/PID/cmdline of a served stack.

The password is written in the userinfo and in the query string (``?password=``, which redis-py and
so LMCache send as AUTH), percent-encoded, and each form must still reach the engine, through the
environment or a 0600 file.
"""

from __future__ import annotations

import configparser
import re
import shlex
from typing import Any

import pytest
import yaml

from kvstack.export import ExportOptions, export_plan
from kvstack.export.bundle import Bundle, ExportFile
from tests.support.compose import container_argv, healthcheck_argv, interpolate, read_dotenv
from tests.unit.export.plans import make_plan

PASSWORD = "s3cr3t-pw%2Fq"  # as written in a URL ("/" percent-encoded)
FORMS = (PASSWORD, "s3cr3t-pw/q")  # ... and as a client decodes it
CALLER_ENV = {"GRAFANA_ADMIN_PASSWORD": "grafana-admin-pw"}  # what the user sets before `compose up`

URLS = (
    f"redis://kv:{PASSWORD}@10.0.0.5:6379/0",
    f"redis://10.0.0.5:6379/0?password={PASSWORD}",
    f"redis://kv:{PASSWORD}@10.0.0.5:6379/0?socket_timeout=5&password={PASSWORD}",
    f"rediss://cache.internal:6380/0?token={PASSWORD}",
    # Loopback: Compose runs this Redis itself, with this password.
    f"redis://:{PASSWORD}@127.0.0.1:6379/0",
    f"redis://127.0.0.1:6379/0?password={PASSWORD}",
)


def _file(bundle: Bundle, name: str) -> ExportFile:
    return next(f for f in bundle.files if f.name == name)


def _walk(doc: Any, keys: tuple[str, ...]) -> list[list[str]]:
    """Every list under one of ``keys``, anywhere in a parsed YAML document."""
    found: list[list[str]] = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in keys and isinstance(v, list):
                found.append([str(x) for x in v])
            found += _walk(v, keys)
    elif isinstance(doc, list):
        for x in doc:
            found += _walk(x, keys)
    return found


def compose_view(bundle: Bundle) -> tuple[list[list[str]], str]:
    """(each container's argv and healthcheck, the remote URL the engine gets), after Compose
    read the exported .env and interpolated the project."""
    env = read_dotenv(_file(bundle, ".env").content) if any(f.name == ".env" for f in bundle.files) else {}
    doc = interpolate(yaml.safe_load(bundle.main.content), {**env, **CALLER_ENV})
    assert "kvstack-canary" in doc["services"]  # the canary sidecar's command line is checked too
    services = doc["services"].values()
    commands = [container_argv(s) for s in services] + [h for s in services if (h := healthcheck_argv(s))]
    return commands, doc["services"]["vllm"]["environment"]["LMCACHE_REMOTE_URL"]


def helm_view(bundle: Bundle) -> tuple[list[list[str]], str]:
    """(the args the chart builds the container's command from, and the canary's command line, the
    remote URL the pod gets: each
    env entry resolved in order, from its value, with $(NAME) of an earlier one expanded as
    Kubernetes does, or from the Secret it references)."""
    values = yaml.safe_load(bundle.main.content)
    commands = _walk(values, ("args", "command", "extraArgs"))
    # ... and the KV canary's Deployment beside the chart (its container's command and args).
    (canary,) = [f for f in bundle.files if f.name == "kvstack-canary.yaml"]
    pods = [d for d in yaml.safe_load_all(canary.content) if d["kind"] == "Deployment"]
    containers = [c for d in pods for c in d["spec"]["template"]["spec"]["containers"]]
    assert containers
    commands += [[*c["command"], *c["args"]] for c in containers]
    secrets = {
        doc["metadata"]["name"]: doc["stringData"]
        for f in bundle.files
        if f.secret
        for doc in yaml.safe_load_all(f.content)
        if doc.get("kind") == "Secret"
    }
    env: dict[str, str] = {}
    for entry in values["servingEngineSpec"]["modelSpec"][0]["env"]:
        if "value" in entry:
            env[entry["name"]] = re.sub(
                r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env[m.group(1)], entry["value"]
            )
        else:
            ref = entry["valueFrom"]["secretKeyRef"]
            env[entry["name"]] = secrets[ref["name"]][ref["key"]]
    return commands, env["LMCACHE_REMOTE_URL"]


def systemd_view(bundle: Bundle) -> tuple[list[list[str]], str]:
    """(ExecStart split as systemd does for this quoting, the URL `kvstack serve` gets)."""
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(bundle.main.content)
    words = [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(unit["Service"]["ExecStart"])]
    assert "--metrics-token-file" in words  # the canary's token: a path, never the token
    if "--remote" in words:
        return [words], words[words.index("--remote") + 1]
    env = dict(
        line.split("=", 1)
        for line in bundle.files[1].content.splitlines()
        if line and not line.startswith("#")
    )
    return [words], shlex.split(env["KVSTACK_REMOTE_URL"])[0]


VIEWS = {"compose": compose_view, "helm": helm_view, "systemd": systemd_view}


@pytest.mark.parametrize("fmt", sorted(VIEWS))
def test_no_export_format_puts_a_url_credential_on_a_command_line(fmt: str) -> None:
    for url in URLS:
        bundle = export_plan(fmt, make_plan(remote_gib=16), ExportOptions(remote_url=url))
        commands, delivered = VIEWS[fmt](bundle)
        assert commands and all(commands), url
        for argv in commands:
            for form in FORMS:
                assert not [a for a in argv if form in a], (url, argv)
        for f in bundle.files:
            if f.secret:
                assert f.mode == 0o600, (url, f.name)
            else:
                assert not [form for form in FORMS if form in f.content], (url, f.name)
        # ... and the credential still reaches the engine, as the URL gave it.
        assert PASSWORD in delivered, (url, delivered)
        assert delivered.partition("@")[0].partition("://")[0] == url.partition("://")[0]
        if "?" in url:
            assert delivered.endswith(url[url.index("?") :]), (url, delivered)
