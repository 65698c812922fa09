"""`kvstack export`: the deployment for the same Plan as Helm values, a Compose project or a systemd unit."""

from __future__ import annotations

import getpass
import os
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from kvstack.cli import options as opt
from kvstack.cli import remote_options as ropt
from kvstack.names import choice


def _kvstack_bin() -> str:
    """Absolute path of this kvstack (systemd runs ExecStart without the caller's PATH)."""
    beside = Path(sys.executable).with_name("kvstack")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("kvstack") or "kvstack"


FORMAT_HELP = "helm, compose, systemd, kserve, llm-d or lmcache-operator."


def register(app: typer.Typer) -> None:
    @app.command("export")
    def _cmd(
        fmt: Annotated[str, typer.Option("--format", "-f", help=FORMAT_HELP)],
        model: opt.Model,
        hardware: opt.Hardware = None,
        context: opt.Context = None,
        users: opt.Users = None,
        engine: opt.Engine = "vllm",
        tp: opt.TensorParallel = None,
        kv_dtype: opt.KvDtype = None,
        remote: ropt.Remote = None,
        remote_file: ropt.RemoteFile = None,
        workload: opt.Workload = None,
        offload: opt.Offload = "auto",
        cache_dir: opt.CacheDir = None,
        retain: opt.Retain = None,
        no_disk: opt.NoDisk = False,
        min_disk_bw: opt.MinDiskBw = None,
        tuned: opt.Tuned = None,
        host: str = typer.Option(
            "127.0.0.1", "--host", help="Address the API binds (compose: the published port)."
        ),
        port: int = typer.Option(8000, "--port", help="Port the API is served on."),
        image: str | None = typer.Option(None, "--image", help="Engine image REPO:TAG (default: by engine)."),
        name: str | None = typer.Option(None, "--name", help="Deployment name (default: from the model)."),
        out: Path | None = typer.Option(None, "--out", help="Write the files into this directory."),
        force: bool = typer.Option(False, "--force", help="Replace files that already exist in --out."),
    ) -> None:
        """Write the deployment (Helm, Compose, systemd, KServe, llm-d, LMCache operator) for the plan."""
        from kvstack.errors import PlanInfeasible
        from kvstack.export import FORMATS, ExportOptions, export_plan
        from kvstack.export.write import write_bundle
        from kvstack.netaddr import check_port
        from kvstack.remote.source import resolve_remote
        from kvstack.serving.plan_inputs import load_or_probe, plan_request
        from kvstack.serving.planner import plan_from_request

        choice(fmt, FORMATS, "--format")
        check_port(port)
        remote = resolve_remote(remote, remote_file)  # --remote-file, --remote, KVSTACK_REMOTE_URL
        if remote is not None:
            from kvstack.remote.url import parse_remote_url

            parse_remote_url(remote)  # malformed -> exit 2 naming the accepted forms
        request = plan_request(
            engine=engine,
            offload=offload,
            context=context,
            users=users,
            tp=tp,
            kv_dtype=kv_dtype,
            remote=remote,
            retain=retain,
            no_disk=no_disk,
            cache_dir=cache_dir,
            min_disk_bw=min_disk_bw,
            tuned=tuned,
        )
        snapshot = load_or_probe(hardware, cache_dir)
        plan = plan_from_request(request, model, workload, snapshot)
        if not plan.feasible:
            raise PlanInfeasible(
                "the plan is not feasible: " + "; ".join(plan.errors),
                hint=f"see: kvstack plan --model {model} (same options) for the reasons",
            )
        software = snapshot.software
        version = software.vllm if plan.engine == "vllm" and software.vllm_distribution == "vllm" else None
        user = getpass.getuser()
        options = ExportOptions(
            remote_url=remote,
            image=image,
            engine_version=version,
            host=host,
            port=port,
            name=name,
            kvstack_bin=_kvstack_bin(),
            model_arg=model,
            hardware_path=str(hardware.expanduser().resolve()) if hardware is not None else None,
            workload_name=workload,
            tuned_path=str(tuned.expanduser().resolve()) if tuned is not None else None,
            user=None if user == "root" else user,
        )
        if out is not None:  # the unit reads the env file written beside it
            env_file = str((out / "kvstack.env").expanduser().resolve())
            options = options.model_copy(update={"env_file": env_file})
        bundle = export_plan(fmt, plan, options)
        if out is None:
            typer.echo(bundle.main.content, nl=False)
            for f in bundle.files[1:]:
                kept = "holds a secret, " if f.secret else ""
                typer.echo(f"note: {f.name} not printed ({kept}use --out DIR to write it)", err=True)
        else:
            for path, f in zip(write_bundle(bundle, out.expanduser(), force), bundle.files, strict=True):
                typer.echo(f"wrote {path} ({'0600' if f.secret else oct(f.mode)[2:].rjust(4, '0')})")
        for note in bundle.notes:
            typer.echo(f"note: {note}", err=True)
        for warning in plan.warnings:
            typer.echo(f"warning: {warning}", err=True)
