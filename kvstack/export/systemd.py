"""A systemd unit that runs ``kvstack serve`` for the same Plan and restarts it on failure.

No secret is written into the unit: it reads an EnvironmentFile (0600) that holds the API key
(KVSTACK_API_KEY) and, when the Redis URL holds a credential (``user:pw@``, ``?password=``, a token:
redact.url_secrets), the whole URL (KVSTACK_REMOTE_URL), which
``kvstack serve`` reads from its environment: never ``--remote ${VAR}`` in ExecStart, which systemd
would expand into the command line.
Quoting follows systemd.service(5) "Command lines": words split on whitespace, double quotes
group, ``%`` starts a specifier (written ``%%``) and ``$`` a variable (written ``$$``).

``kvstack serve`` runs the KV canary wherever offload tiers serve; the unit pins its /metrics port
(127.0.0.1) and the file holding the bearer token (``--metrics-token-file``), which the operator
creates: the export writes no token, only prometheus-kvstack.yml (the scrape job, reading the same
file as ``credentials_file``) and prometheus-kvstack-rules.yml (the alerts).
"""

from __future__ import annotations

import re

from kvstack.export import canary
from kvstack.export.bundle import Bundle, ExportFile, ExportOptions
from kvstack.export.deployment import canary_runs, deployment_name, remote
from kvstack.planning.schema import Plan
from kvstack.remote.source import REMOTE_URL_ENV

API_KEY_ENV = "KVSTACK_API_KEY"
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def quote_arg(arg: str) -> str:
    """One argv word for ExecStart, with systemd's specifier and variable expansion disabled."""
    text = arg.replace("%", "%%").replace("$", "$$")
    if text and _PLAIN.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def env_value(value: str) -> str:
    """A value for an EnvironmentFile line: single quotes keep it literal (systemd.exec(5))."""
    if _PLAIN.fullmatch(value) and "%" not in value:
        return value
    if "'" not in value:
        return f"'{value}'"
    # EnvironmentFile= does no variable expansion: only \\ and \" need escaping in double quotes.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def serve_argv(plan: Plan, options: ExportOptions) -> list[str]:
    """``kvstack serve`` arguments that reproduce the Plan (its decisions pinned, not re-derived)."""
    argv = [
        options.kvstack_bin, "serve",
        "--model", options.model_arg or plan.model.path,
        "--engine", plan.engine,
        "--offload", plan.transfer.connector,
        "--context", str(plan.workload.context_tokens),
        "--users", str(plan.workload.users),
        "--tp", str(plan.parallel.tensor_parallel_size),
        "--kv-dtype", plan.cache.kv_cache_dtype,
        "--host", options.host,
        "--port", str(options.port),
    ]  # fmt: skip
    if options.hardware_path:
        argv += ["--hardware", options.hardware_path]
    if options.workload_name:
        argv += ["--workload", options.workload_name]
    if options.tuned_path:
        argv += ["--tuned", options.tuned_path]
    if canary_runs(plan):
        name = deployment_name(plan, options.name)
        argv += [
            "--metrics-port", str(options.metrics_port),
            "--metrics-token-file", canary.token_file(options, name),
        ]  # fmt: skip
    return argv


def _prometheus_files(name: str, options: ExportOptions) -> list[ExportFile]:
    """The scrape job for the canary's /metrics and its alerts, for the operator's Prometheus."""
    token = canary.token_file(options, name)
    job = f"{canary.JOB}-{name}"
    scrape = {"scrape_configs": [canary.scrape_job(f"127.0.0.1:{options.metrics_port}", token, job)]}
    header = (
        f"# Prometheus scrape job for kvstack-{name}.service's KV canary (kvstack serve's own\n"
        f"# /metrics on 127.0.0.1:{options.metrics_port}): add it under scrape_configs in prometheus.yml,\n"
        "# and prometheus-kvstack-rules.yml under rule_files.\n"
        f"# The bearer token is read from {token},\n"
        "# the file kvstack serve reads too (--metrics-token-file): create it before starting the unit,\n"
        "# one line, mode 0600, e.g.\n"
        f"#   (umask 077; openssl rand -hex 32 > {token})\n"
        "# and make it readable by the user Prometheus runs as (and by the unit's User=, when that is\n"
        "# another user: mode 0640 with a group both share).\n"
    )
    action = (
        f"kvstack-{name}.service acted as its --on-wrong-kv says (by default: the engines restarted "
        "without their offload tiers; kvstack_offload_enabled is 0): see its journal and run dir"
    )
    return [
        ExportFile(name="prometheus-kvstack.yml", content=header + canary.dump(scrape)),
        ExportFile(
            name="prometheus-kvstack-rules.yml",
            content=f"# Alerts on kvstack-{name}.service's KV canary: add it under rule_files in\n"
            "# prometheus.yml\n" + canary.dump(canary.alert_rules(job, action)),
        ),
    ]


def render_systemd(plan: Plan, options: ExportOptions) -> Bundle:
    url = remote(options, plan)
    name = deployment_name(plan, options.name)
    words = [quote_arg(a) for a in serve_argv(plan, options)]
    env_lines = [
        "# Environment for kvstack-" + name + ".service (keep it 0600: it holds secrets)",
        f"# {API_KEY_ENV}=the key clients must send (kvstack serve --api-key)",
    ]
    if url is not None:
        if url.has_secret:
            # Only the environment: "--remote ${VAR}" would be expanded by systemd into the command
            # line, which every local user reads. `kvstack serve` reads KVSTACK_REMOTE_URL itself.
            env_lines.append(f"{REMOTE_URL_ENV}={env_value(url.raw)}")
        else:
            words += ["--remote", quote_arg(url.raw)]
    description = f"kvstack serve {plan.model.geometry.name} ({plan.engine}, {plan.transfer.connector})"
    lines = [
        "# systemd unit written by kvstack export",
        f"# install: cp kvstack-{name}.service /etc/systemd/system/ && systemctl daemon-reload",
        f"#          && systemctl enable --now kvstack-{name}",
    ]
    if canary_runs(plan):
        token = canary.token_file(options, name)
        lines += [
            "# KV canary: kvstack serve re-checks cached answers against recompute and, on wrong KV,",
            "# restarts the engines without their offload tiers. Its /metrics is on",
            f"# 127.0.0.1:{options.metrics_port}, behind the bearer token in",
            f"#   {token}",
            "# (no secret is in this unit): create that file first, one line, mode 0600 (see",
            "# prometheus-kvstack.yml); kvstack serve does not start without it.",
        ]
    lines += [
        "[Unit]",
        f"Description={description.replace('%', '%%')}",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
    ]
    if options.user:
        lines.append(f"User={options.user}")
    lines += [
        f"EnvironmentFile=-{options.env_file}",
        "Environment=PYTHONUNBUFFERED=1",
        "ExecStart=" + " ".join(words),
        "Restart=on-failure",
        "RestartSec=10s",
        # kvstack serve stops its engine's process group itself on SIGTERM (one shared deadline);
        # mixed sends SIGTERM to kvstack only, then SIGKILL to whatever is left after the timeout.
        "KillMode=mixed",
        "TimeoutStopSec=90s",
        "PrivateTmp=true",
        "NoNewPrivileges=true",
        "LimitMEMLOCK=infinity",  # pinned host memory for the CPU tier
        "LimitNOFILE=65536",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    unit = ExportFile(name=f"kvstack-{name}.service", content="\n".join(lines))
    env_file = ExportFile(
        name=options.env_file.rsplit("/", 1)[-1],
        content="\n".join(env_lines) + "\n",
        mode=0o600,
        secret=url is not None and url.has_secret,
    )
    notes = [f"the unit reads {options.env_file}: put the env file there (mode 0600) or edit EnvironmentFile"]
    files = [unit, env_file]
    if canary_runs(plan):
        token = canary.token_file(options, name)
        files += _prometheus_files(name, options)
        notes.append(
            f"create the canary's metrics token before starting the unit: (umask 077; openssl rand -hex 32 "
            f"> {token}); kvstack serve (--metrics-token-file) and Prometheus (prometheus-kvstack.yml, "
            f"credentials_file) both read it; its /metrics is on 127.0.0.1:{options.metrics_port}"
        )
    return Bundle(format="systemd", files=files, notes=notes)
