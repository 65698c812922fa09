"""A ``bench --trace --url`` server's offload tiers, found the way ``top`` and ``validate`` find them.

``--lmcache URL`` names LMCache's cache server (its ``/status`` sizes the tiers, its ``/metrics``
says which tier served each token). Otherwise the ``kvstack serve`` run that started the server
says: ``--run-dir`` when given, else the newest run under the runs root whose launch.json serves
``--url``; its launch.json names the cache server (as ``top`` reads it, top/targets.py) and its
plan.json the tiers and kvstack's disk cap. A server no run dir knows and no ``--lmcache`` names has
tiers kvstack cannot see: the replay then predicts nothing where the counters show an offload tier
(bench/replay/trace_bench.py says why).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kvstack.clients import control
from kvstack.errors import InputError, KvstackError
from kvstack.jsonvalue import JsonObject
from kvstack.planning.schema import Plan
from kvstack.redact import redact_url
from kvstack.rundir import LAUNCH_JSON, PLAN_JSON, default_runs_root
from kvstack.serving.served_layout import ServedLayout
from kvstack.top.targets import Targets, from_run_dir, normalize_base
from kvstack.userfile import read_json_object, read_model

SERVER = "server"


def _runs(root: Path) -> list[Path]:
    """Run dirs under ``root`` with a launch.json, newest first."""
    try:
        runs = [p for p in root.iterdir() if (p / LAUNCH_JSON).is_file()]
    except OSError:
        return []
    return sorted(runs, key=lambda p: ((p / LAUNCH_JSON).stat().st_mtime, p.name), reverse=True)


def _targets(run_dir: Path) -> Targets | None:
    try:
        return from_run_dir(run_dir)
    except KvstackError:
        return None


def find_run(url: str, run_dir: Path | None, runs_root: Path | None = None) -> tuple[Path, Targets] | None:
    """The serve run that started ``url``: ``run_dir`` (which must serve it), else the newest one."""
    if run_dir is not None:
        targets = from_run_dir(run_dir)  # a damaged or missing record is a PathError here
        if url not in targets.servers:
            raise InputError(
                f"the run in {run_dir} serves {', '.join(map(redact_url, targets.servers))}, "
                f"not {redact_url(url)}",
                hint="give the --run-dir of the kvstack serve run behind --url, or --lmcache URL",
            )
        return run_dir, targets
    for candidate in _runs(runs_root or default_runs_root()):
        recorded = _targets(candidate)
        if recorded is not None and url in recorded.servers:
            return candidate, recorded
    return None


def _plan(run_dir: Path, launch: JsonObject) -> tuple[Plan | None, str | None]:
    """The plan the server runs: its replica's plan.json where the launch names one, else the run's."""
    where = Path(str(launch["run_dir"])) if launch.get("run_dir") else run_dir
    path = where / PLAN_JSON
    if not path.is_file():
        return None, f"{path} is missing: the tiers are sized from the cache server alone"
    try:
        return read_model(path, Plan, "a kvstack plan", "restart kvstack serve"), None
    except KvstackError as exc:
        return None, f"{exc.message}: the tiers are sized from the cache server alone"


def _launch(run_dir: Path, url: str) -> JsonObject:
    doc = read_json_object(run_dir / LAUNCH_JSON, InputError, "restart kvstack serve", what="launch record")
    replicas = doc.get("replicas")
    launches = [r for r in replicas if isinstance(r, dict)] if isinstance(replicas, list) else [doc]
    return next((x for x in launches if x.get("base_url") == url), doc)


def url_layout(
    url: str,
    metrics_urls: Sequence[str] = (),
    lmcache: str | None = None,
    run_dir: Path | None = None,
    runs_root: Path | None = None,
) -> tuple[ServedLayout, list[str]]:
    """The layout behind ``url`` with whatever is known of its tiers, and notes on where from."""
    metrics = [url + "/metrics", *metrics_urls]
    notes: list[str] = []
    cache_server = normalize_base(lmcache, "--lmcache") if lmcache else None
    plan: Plan | None = None
    cache_dirs: dict[str, str] = {}
    served_model: str | None = None
    found = find_run(url, run_dir, runs_root)
    if found is not None:
        where, targets = found
        launch = _launch(where, url)
        plan, problem = _plan(where, launch)
        notes += [problem] if problem else []
        served_model = str(launch["served_model_name"]) if launch.get("served_model_name") else None
        dirs = launch.get("cache_dirs")
        cache_dirs = {str(k): str(v) for k, v in dirs.items()} if isinstance(dirs, dict) else {}
        if cache_server is None:
            named = targets.cache_servers_of(url)
            cache_server = named[0] if named else None
        # The run's control token, from the run dir itself: the cache server's /status (its sizes)
        # answers kvstack alone, and this user's token index may live elsewhere (XDG_STATE_HOME).
        token = control.read_control_token(where)
        if token:
            for known in filter(None, (url, cache_server)):
                control.remember(known, token)
        notes.append(
            f"the tiers of {redact_url(url)} are read from the kvstack serve run in {where}"
            + (f" (cache server {redact_url(cache_server)})" if cache_server else " (no cache server)")
        )
    elif cache_server is None:
        notes.append(
            f"no kvstack serve run under {runs_root or default_runs_root()} serves {redact_url(url)} and no "
            "--lmcache was given: offload tiers, if any, are not known"
        )
    if cache_server is not None and cache_server + "/metrics" not in metrics:
        metrics.append(cache_server + "/metrics")
    layout = ServedLayout(
        SERVER,
        url,
        tuple(dict.fromkeys(metrics)),
        served_model=served_model,
        cache_server_url=cache_server,
        cache_dirs=cache_dirs,
        plan=plan,
    )
    return layout, notes
