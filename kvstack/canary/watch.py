"""`kvstack canary`: the canary against any running server, in the foreground.

What ``kvstack serve`` runs beside its engines, for a server kvstack did not start (a Compose or
Helm deployment's sidecar, an engine started by hand): the same checks, run-dir files and
/metrics. It cannot restart that server, so wrong KV is reported (``warn``) or ends the watch with
exit 1 (``stop``: an orchestrator that restarts the sidecar, or alerts on its exit, takes it from
there).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from pathlib import Path

from kvstack.canary.checker import CanaryConfig
from kvstack.canary.defaults import OnWrongKv
from kvstack.canary.inputs import CanaryFields
from kvstack.canary.runner import CanaryRunner
from kvstack.canary.state import CheckRecord
from kvstack.errors import Interrupted, WrongKvServed
from kvstack.fsutil import atomic_write, ensure_private_dir
from kvstack.validation.report import ValidationTarget

METRICS_TOKEN = "metrics-token"  # in the watch's run dir when no token file is given
POLL_S = 0.25


def own_token(run_dir: Path) -> str:
    """A fresh bearer for /metrics, kept 0600 in the (0700) run dir."""
    token = secrets.token_urlsafe(32)
    atomic_write(ensure_private_dir(run_dir) / METRICS_TOKEN, token + "\n", mode=0o600)
    return token


def check_line(record: CheckRecord) -> str:
    typical = "n/a" if record.typical is None else f"{record.typical:.4f}"
    gate = "n/a" if record.gate is None else f"{record.gate:.3f}"
    on = f" on {record.replica}" if record.replica is not None else ""
    text = (
        f"check {record.verdict}: probe {record.probe}{on} ({record.prompt_tokens} tokens, planted "
        f"{record.age_s:.0f} s ago) served from {record.served_from}; typical disagreement {typical} "
        f"nats (gate {gate})"
    )
    return text + (f": {record.detail}" if record.detail and record.verdict != "pass" else "")


def watch(
    target: ValidationTarget,
    config: CanaryConfig,
    on_wrong_kv: OnWrongKv,
    run_dir: Path,
    metrics: tuple[str, int, str | None] | None,
    say: Callable[[str], None],
    warn: Callable[[str], None],
    max_checks: int = 0,
) -> int:
    """Run until interrupted, or ``max_checks`` checks; 0, or raises WrongKvServed (``stop``)."""
    ensure_private_dir(run_dir)
    runner = CanaryRunner(target, config, on_wrong_kv, run_dir, on_error=warn)
    if metrics is not None:
        host, port, token = metrics
        runner.start(host, port, token or own_token(run_dir))
    else:
        runner.start()
    where = f"; metrics at {runner.state.metrics_url} (bearer token required)" if runner.metrics else ""
    say(
        f"canary on {target.base_url}: a probe asked again every {config.interval_s:g} s at most, within "
        f"{config.budget:.2%} of the engine's prefill; state in {run_dir}{where}"
    )
    seen = 0
    try:
        while max_checks <= 0 or seen < max_checks:
            state = runner.snapshot()
            if state.last is not None and state.total > seen:
                seen = state.total
                say(check_line(state.last))
            for record in runner.wrong_kv():
                message = f"wrong KV: {check_line(record)}"
                if on_wrong_kv == "stop":
                    raise WrongKvServed(message, hint=f"every check is in {run_dir}/events.jsonl")
                warn(message)
            time.sleep(POLL_S)
    except Interrupted:
        say("stopped")
    finally:
        runner.stop()
        final = runner.snapshot()
        say(f"{final.summary()}; {final.share_line()}")
    return 0


def watch_server(
    target: ValidationTarget,
    fields: CanaryFields,
    probe_tokens: int | None,
    on_wrong_kv: OnWrongKv,
    run_dir: Path | None,
    metrics: tuple[str, int, str | None] | None,
    say: Callable[[str], None],
    warn: Callable[[str], None],
    max_checks: int = 0,
) -> int:
    """`kvstack canary`'s use case: ``watch`` a server kvstack did not start, with the canary's
    fields (``CanaryInputs.fields``), its state in ``run_dir`` (default: a new canary-* dir under
    kvstack's runs), until a signal or ``max_checks``."""
    from kvstack.rundir import default_runs_root
    from kvstack.runtime.signals import StopOnSignal

    directory = run_dir or default_runs_root() / f"canary-{time.strftime('%Y%m%d-%H%M%S')}"
    config = CanaryConfig(
        interval_s=fields["canary_interval_s"], budget=fields["canary_budget"], probe_tokens=probe_tokens
    )
    signals = StopOnSignal(stop=lambda: None, hurry=lambda: None, stopping=lambda: False)
    signals.install()
    try:
        return watch(
            target, config, on_wrong_kv, directory.expanduser().absolute(), metrics, say, warn, max_checks
        )
    finally:
        signals.restore()
