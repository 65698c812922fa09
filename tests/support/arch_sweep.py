"""Every text-generation architecture the installed vLLM registers, as a tiny config-only checkpoint
(issue #49 item 3: coverage by sweep, not by list). Used by scripts/sweep-architectures and
tests/integration/test_architecture_sweep.py.

Run under the engine's Python (it imports vLLM's registry and, for a few families, vLLM's own config
classes), from the repository root, so that the caller never imports vLLM:

    python -m tests.support.arch_sweep OUT_DIR [--arch A ...]

writes OUT_DIR/<arch>/ (config.json and the demo model's tokenizer, no weights: plans read the
config, the engine's spec probe builds the model on the meta device, an engine start takes
``--load-format dummy``) and prints a manifest, one JSON object: ``{"vllm": VERSION, "archs":
[{arch, model_type, config_source, dir | reason}, ...]}``.

A config is found, in this order, by:
- ``transformers``: transformers' auto mappings name the architecture (model_type -> class names);
- ``vllm-config``: vLLM's own config registry (vllm/transformers_utils/config.py ``_CONFIG_REGISTRY``)
  has the model_type of the vLLM module that implements the architecture;
- ``donor``: another registered architecture implemented by the same vLLM class has one (vLLM's
  aliases: ``LLaMAForCausalLM``, ``InternLM3ForCausalLM`` are its ``LlamaForCausalLM``), or by the
  same vLLM module;
- ``transformers-module``: transformers has a model_type named as the vLLM module (``phimoe``).
The config class's defaults are then shrunk: 4 layers (more where a period needs them, as Jamba's
attention every 8th), hidden 256, 4 heads of 64, 2 KV heads, 4 experts (2 per token), the demo's
vocabulary of 1024; a per-layer list or pattern string keeps every kind of layer it had.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.edge_models import ROOT, write_config_model

LAYERS = 4
MAX_LAYERS = 8
HIDDEN = 256
# Shrunk values, set only where the family's config has the key.
SHRINK: dict[str, Any] = {
    "hidden_size": HIDDEN,
    "n_embd": HIDDEN,
    "d_model": HIDDEN,
    "intermediate_size": 512,
    "ffn_hidden_size": 512,
    "ffn_dim": 512,
    "n_inner": 512,
    "num_attention_heads": 4,
    "n_head": 4,
    "num_heads": 4,
    "num_key_value_heads": 2,
    "num_kv_heads": 2,
    "multi_query_group_num": 2,
    "head_dim": 64,
    "kv_channels": 64,
    "vocab_size": 1024,
    "padded_vocab_size": 1024,
    "max_position_embeddings": 16384,
    "n_positions": 16384,
    "seq_length": 16384,
    "moe_intermediate_size": 128,
    "expert_intermediate_size": 128,
    "shared_expert_intermediate_size": 256,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "moe_num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_k": 2,
    "moe_topk": 2,
    "top_k": 2,
    "n_group": 1,
    "topk_group": 1,
    "n_shared_experts": 1,
    "num_shared_experts": 1,
    "q_lora_rank": 128,
    "rotary_dim": 32,
    "vocab_size_per_layer_input": 1024,
    "hidden_size_per_layer_input": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "mamba_n_heads": 8,
    "mamba_d_head": 64,
    "mamba_num_heads": 8,
    "mamba_head_dim": 64,
    "mamba_n_groups": 1,
    "mamba_d_ssm": 512,
    "n_groups": 1,
    "ssm_state_size": 16,
    "mamba_d_state": 16,
    "state_size": 16,
    "time_step_rank": 16,
}
# Counts of layers that must stay below the shrunk layer count.
_LAYER_COUNTS = (
    "num_kv_shared_layers",
    "max_window_layers",
    "first_k_dense_replace",
    "num_nextn_predict_layers",
)
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
# Integer periods of a layer pattern: the model keeps at least one of each kind at this many layers.
_PERIODS = (
    "attn_layer_period",
    "expert_layer_period",
    "full_attention_interval",
    "sliding_window_pattern",
    "interleave_moe_layer_step",
    "global_attn_every_n_layers",
)


def _registry() -> tuple[str, dict[str, tuple[str, str]], dict[str, Any]]:
    import vllm
    from vllm.model_executor.models.registry import _TEXT_GENERATION_MODELS
    from vllm.transformers_utils.config import _CONFIG_REGISTRY

    archs = {arch: (str(v[0]), str(v[1])) for arch, v in _TEXT_GENERATION_MODELS.items()}
    return str(vllm.__version__), archs, dict(_CONFIG_REGISTRY)


def _vllm_config_class(entry: Any) -> Any:
    """An entry of vLLM's config registry: the class, or its name in vllm.transformers_utils.configs."""
    if isinstance(entry, str):
        import vllm.transformers_utils.configs as configs

        return getattr(configs, entry)
    return entry


def _vllm_bases(module: str, impl: str) -> list[str]:
    """The names of the classes vLLM's implementation of an architecture derives from."""
    import importlib

    name = module if module.startswith("vllm.") else f"vllm.model_executor.models.{module}"
    cls = getattr(importlib.import_module(name), impl)
    return [base.__name__ for base in cls.__mro__[1:]]


def _transformers_model_types() -> dict[str, str]:
    """Architecture class name -> model_type, from every transformers auto mapping; of several, a
    text model's (Llama4ForCausalLM is llama4_text's, not the multimodal llama4's)."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto import modeling_auto

    found: dict[str, str] = {}
    for arch, model_type in _all_model_types(modeling_auto).items():
        text = [
            t for t in model_type if t in CONFIG_MAPPING and "text_config" not in _subs(CONFIG_MAPPING[t])
        ]
        found[arch] = (text or model_type)[0]
    return found


def _subs(cls: Any) -> dict[str, Any]:
    subs = getattr(cls, "sub_configs", None)
    return subs if isinstance(subs, dict) else {}


def _all_model_types(modeling_auto: Any) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    # The causal-LM mapping first: Llama4ForCausalLM is llama4_text's (llama4 is the multimodal one).
    names = sorted(dir(modeling_auto), key=lambda n: n != "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES")
    for name in names:
        mapping = getattr(modeling_auto, name)
        if not name.endswith("_MAPPING_NAMES") or not isinstance(mapping, dict):
            continue
        for model_type, classes in mapping.items():
            for cls in classes if isinstance(classes, (tuple, list)) else [classes]:
                types = found.setdefault(str(cls), [])
                if str(model_type) not in types:
                    types.append(str(model_type))
    return found


def config_class(
    arch: str, archs: dict[str, tuple[str, str]], vllm_configs: dict[str, Any]
) -> tuple[str, Any]:
    """(config source, config class) for ``arch``; raises LookupError with the reason."""
    from transformers import CONFIG_MAPPING

    by_class = _transformers_model_types()
    module, impl = archs[arch]
    model_type = by_class.get(arch)
    if model_type is not None and model_type in CONFIG_MAPPING:
        return "transformers", CONFIG_MAPPING[model_type]
    short = module.rsplit(".", 1)[-1]
    if short in vllm_configs:
        return "vllm-config", _vllm_config_class(vllm_configs[short])
    donors = [a for a, v in archs.items() if a != arch and v == (module, impl)]
    donors += [a for a, v in archs.items() if a != arch and v[0] == module and a not in donors]
    for donor in donors:
        donor_type = by_class.get(donor)
        if donor_type is not None and donor_type in CONFIG_MAPPING:
            return f"donor {donor}", CONFIG_MAPPING[donor_type]
    if short in CONFIG_MAPPING:
        return "transformers-module", CONFIG_MAPPING[short]
    for base in _vllm_bases(module, impl):  # vLLM's class derives from another family's
        base_type = by_class.get(base)
        if base_type is not None and base_type in CONFIG_MAPPING:
            return f"base {base}", CONFIG_MAPPING[base_type]
    raise LookupError(
        f"no config class: transformers does not name {arch}, vLLM's config registry has no "
        f"{short!r}, and neither another architecture of vllm/model_executor/models/{short}.py nor a "
        "base class of vLLM's has one"
    )


def _keep_kinds(values: list[Any] | str, n: int) -> list[Any] | str:
    """The first ``n`` entries of a per-layer list (or pattern string), every kind kept: a kind the
    first ``n`` lack replaces the last entries."""
    items = list(values)
    head = items[:n]
    missing = [v for v in dict.fromkeys(items) if v not in head]
    for i, value in enumerate(missing[:n]):
        head[n - 1 - i] = value
    return "".join(head) if isinstance(values, str) else head


def _layer_count(defaults: dict[str, Any]) -> int:
    periods = [v for k, v in defaults.items() if k in _PERIODS and isinstance(v, int) and v > 0]
    return min(max([LAYERS, *periods]), MAX_LAYERS)


def _shrink_kwargs(cls: Any) -> tuple[dict[str, Any], int | None, int]:
    """(the keyword arguments that shrink ``cls``'s defaults (module docstring), the default and the
    shrunk layer count)."""
    defaults: dict[str, Any] = cls().to_dict()
    old_layers = next((defaults[k] for k in _LAYER_KEYS if isinstance(defaults.get(k), int)), None)
    layers = _layer_count(defaults)
    kwargs = {k: v for k, v in SHRINK.items() if k in defaults and defaults[k] is not None}
    kwargs.update({k: layers for k in _LAYER_KEYS if isinstance(defaults.get(k), int)})
    if isinstance(defaults.get("expand"), int) and "num_heads" in kwargs and "head_dim" in kwargs:
        kwargs["num_heads"] = HIDDEN * defaults["expand"] // kwargs["head_dim"]  # Mamba2's SSM heads
    for key, value in defaults.items():
        if old_layers and key not in kwargs and isinstance(value, (list, str)) and len(value) == old_layers:
            kwargs[key] = _keep_kinds(value, layers)
        elif key in _LAYER_COUNTS and isinstance(value, int) and not isinstance(value, bool):
            # A count of layers: all of them where it was all of them, else half (Gemma 3n's shared).
            kwargs[key] = layers if value == old_layers else min(value, layers // 2)
    text_cls = _subs(cls).get("text_config")
    if getattr(text_cls, "model_type", "") and isinstance(defaults.get("text_config"), dict):
        kwargs["text_config"] = {**_shrink_kwargs(text_cls)[0], **_TOKENS}  # a multimodal config's LM
    return kwargs, old_layers, layers


_TOKENS = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2}


def shrunk_config(arch: str, cls: Any) -> dict[str, Any]:
    """``cls``'s defaults shrunk (module docstring), as config.json (bfloat16, ``architectures``)."""
    kwargs, old_layers, layers = _shrink_kwargs(cls)
    kwargs.update(architectures=[arch], **_TOKENS)
    config = cls(**kwargs)
    out: dict[str, Any] = json.loads(config.to_json_string(use_diff=False))
    # A per-layer list __init__ made from a pattern longer than the layers (left as its default).
    for key, value in list(out.items()):
        if (
            key not in kwargs
            and isinstance(value, list)
            and old_layers
            and len(value) == old_layers != layers
        ):
            out[key] = _keep_kinds(value, layers)
    out["architectures"] = [arch]
    out["dtype"] = out["torch_dtype"] = "bfloat16"
    return _own_sub_configs(out)


def _own_sub_configs(config: dict[str, Any]) -> dict[str, Any]:
    """An embedded sub-config without a model type of its own (DBRX's attn_config, ffn_config)
    written with its own keys only, as a checkpoint writes it: vLLM 0.32 refuses the generic ones
    transformers dumps beside them ("Found unknown kwargs={'_name_or_path': '', ...}")."""
    from transformers import PretrainedConfig

    generic = set(PretrainedConfig().to_dict())
    for key, value in config.items():
        if isinstance(value, dict) and "_name_or_path" in value and not value.get("model_type"):
            config[key] = {k: v for k, v in value.items() if k not in generic}
    return config


def write_arch_model(arch: str, config: dict[str, Any], out: Path) -> Path:
    """``out`` with the architecture's shrunk config.json and the demo tokenizer."""
    return write_config_model(config, out)


def write_all(out: Path, only: list[str] | None = None) -> dict[str, Any]:
    """Every architecture (or ``only``) under ``out``: the manifest (module docstring)."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    version, archs, vllm_configs = _registry()
    rows: list[dict[str, Any]] = []
    for arch in sorted(only or archs):
        row: dict[str, Any] = {"arch": arch, "vllm_module": archs[arch][0] if arch in archs else None}
        try:
            if arch not in archs:
                raise LookupError(f"vLLM {version} registers no text-generation architecture {arch}")
            source, cls = config_class(arch, archs, vllm_configs)
            row["config_source"] = source
            config = shrunk_config(arch, cls)
            row["model_type"] = config.get("model_type")
            row["dir"] = str(write_arch_model(arch, config, out / arch))
        except Exception as exc:  # one family's config class failing is that family's row
            row["reason"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:400]
        rows.append(row)
    return {"vllm": version, "archs": rows}


def write_models(
    python: str, out: Path, only: list[str] | None = None, timeout: float = 600
) -> dict[str, Any]:
    """``write_all`` under ``python`` (the engine's, with vLLM) in a subprocess: its manifest."""
    argv = [python, "-m", "tests.support.arch_sweep", str(out)]
    for arch in only or []:
        argv += ["--arch", arch]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=timeout, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"arch_sweep failed ({done.returncode}): {done.stderr[-2000:]}")
    manifest: dict[str, Any] = json.loads(lines[-1])
    return manifest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out", type=Path)
    parser.add_argument("--arch", action="append", help="only these (repeatable)")
    args = parser.parse_args()
    manifest = write_all(args.out, args.arch)
    sys.stdout.flush()
    print(json.dumps(manifest))
    return 0


if __name__ == "__main__":
    sys.exit(main())


# --- The plan-level check: kvstack's real CLI on one checkpoint (no vLLM imported here). ---

HARDWARE = ROOT / "profiles" / "hardware" / "no-gpu.json"


def layout_kind(plan: dict[str, Any]) -> str:
    """The plan's layer layout in words: "full", "full+sliding", "mla", "full+state", ...; "(est)" when
    the kinds are kvstack's reader's, not the engine's."""
    model = plan["model"]
    kinds = [
        ("mla" if model.get("attention") == "mla" else "full", model.get("full_attention_layers")),
        ("sliding", model.get("sliding_layers")),
        ("chunked", model.get("chunked_layers")),
        ("state", model.get("state_layers")),
    ]
    name = "+".join(k for k, n in kinds if n) or "none"
    source = model.get("layer_kinds_source") or ""
    return name if source.startswith("vLLM") else f"{name} (est)"


def plan_verdict(code: int, stdout: str, stderr: str) -> tuple[str, str, dict[str, Any] | None]:
    """(verdict, detail, plan JSON) of one ``kvstack plan --json``: ``plan`` (exit 0 and a plan;
    ``infeasible``: exit 1 and a plan that does not fit this machine),
    ``refused`` (exit 2, an ``error:`` line and at most a ``hint:`` line, no traceback), else
    ``CRASH`` with what went wrong."""
    lines = [x for x in stderr.strip().splitlines() if x and not x.startswith("warning:")]
    if code == 1 and stdout.strip():  # a plan that does not fit this machine is a plan
        try:
            plan = json.loads(stdout)
        except json.JSONDecodeError:
            plan = None
        if isinstance(plan, dict) and plan.get("feasible") is False and "Traceback" not in stderr:
            return "infeasible", "; ".join(plan.get("errors") or [])[:300], plan
    if "Traceback" in stderr or code not in (0, 2):
        return "CRASH", f"exit {code}: {(lines or ['no output'])[-1][:300]}", None
    if code == 2:
        one_line = bool(lines) and lines[0].startswith("error: ") and len(lines) <= 2
        one_line = one_line and (len(lines) == 1 or lines[1].startswith("hint: ")) and not stdout.strip()
        if not one_line:
            return "CRASH", f"exit 2 but not one line: {stderr.strip()[:300]}", None
        return "refused", lines[0].removeprefix("error: "), None
    try:
        plan: dict[str, Any] = json.loads(stdout)
    except json.JSONDecodeError:
        return "CRASH", f"exit 0 but no JSON plan: {stdout[:200]}", None
    return "plan", str(plan.get("connector")), plan


def run_plan(
    model_dir: Path, env: dict[str, str], *args: str, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``kvstack plan --model DIR --json`` (the no-GPU hardware snapshot) with this interpreter."""
    argv = [sys.executable, "-m", "kvstack", "plan", "--model", str(model_dir), "--hardware", str(HARDWARE)]
    return subprocess.run(
        [*argv, "--json", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
        check=False,
    )
