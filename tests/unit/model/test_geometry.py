"""KV geometry from real config.json files (kvstack/model/geometry.py, local.py) and the catalog
(kvstack/model/catalog.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvstack.errors import ModelConfigError
from kvstack.model.catalog import catalog_model, catalog_names, find_catalog_entry, load_catalog
from kvstack.model.engine_layers import apply_engine_spec
from kvstack.model.geometry import DEFAULT_MAX_CONTEXT, ModelGeometry, geometry_from_config
from kvstack.model.local import load_model_dir, local_model_dir
from kvstack.profiles import profiles_dir
from tests.support.engine_specs import edge_config, recorded_spec


def load_model(spec: str) -> tuple[ModelGeometry, str]:
    """The offline part of resolve_model: a local directory (or its config.json), else the catalog."""
    local = local_model_dir(spec) if spec.strip() else None
    if local is not None:
        return load_model_dir(local), str(local)
    return catalog_model(spec)


CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "configs"
KIB, GIB = 1024, 1 << 30


def _model_dir(tmp_path: Path, fixture: str) -> Path:
    d = tmp_path / fixture.removesuffix(".json")
    d.mkdir()
    shutil.copy(CONFIGS / fixture, d / "config.json")
    return d


# fixture -> (attention, kv bytes/token of full layers, full layers, sliding layers, window,
#             sliding bytes per sequence, max context, published params, weight dtype)
GEOMETRY = {
    # REFERENCE.md: 32 x 8 x 128 -> 128 KiB/token in bf16.
    "Llama-3.1-8B.json": ("gqa", 128 * KIB, 32, 0, None, 0, 131072, 8.03e9, "bfloat16"),
    # sliding_window is 131072 but use_sliding_window is false: every layer is full attention.
    "Qwen2.5-7B-Instruct.json": ("gqa", 2 * 28 * 4 * 128 * 2, 28, 0, None, 0, 32768, 7.62e9, "bfloat16"),
    "Qwen3-32B.json": ("gqa", 2 * 64 * 8 * 128 * 2, 64, 0, None, 0, 40960, 32.8e9, "bfloat16"),
    # REFERENCE.md: 61 x (512 + 64) x 2 B = 70,272 B/token, no factor 2.
    "DeepSeek-V3.json": ("mla", 70272, 61, 0, None, 0, 163840, 671e9, "fp8"),
    # 12 sliding (window 128) + 12 full layers, 8 KV heads x 64.
    "gpt-oss-20b.json": (
        "gqa",
        12 * 2 * 8 * 64 * 2,
        12,
        12,
        128,
        12 * 2 * 8 * 64 * 2 * 128,
        131072,
        20.9e9,
        "mxfp4",
    ),
    # sliding_window 4096 on every layer, no use_sliding_window key: no full-attention layer.
    "Mistral-7B-v0.1.json": ("gqa", 0, 0, 32, 4096, 32 * 2 * 8 * 128 * 2 * 4096, 32768, 7.24e9, "bfloat16"),
}


@pytest.mark.parametrize("fixture", sorted(GEOMETRY))
def test_real_configs_give_the_published_geometry(tmp_path: Path, fixture: str) -> None:
    attention, bpt, full, sliding, window, sliding_seq, max_ctx, params, weight_dtype = GEOMETRY[fixture]
    model, path = load_model(str(_model_dir(tmp_path, fixture)))
    assert Path(path).is_absolute() and Path(path).name == fixture.removesuffix(".json")
    assert model.source == path
    assert model.attention == attention
    assert model.kv_bytes_per_token == bpt
    assert (model.full_attention_layers, model.sliding_layers, model.sliding_window) == (
        full,
        sliding,
        window,
    )
    assert model.sliding_kv_bytes_per_sequence == sliding_seq
    assert model.max_context == max_ctx
    assert model.params == pytest.approx(params, rel=0.02)
    assert model.weight_dtype == weight_dtype


def test_mla_reports_one_latent_per_layer(tmp_path: Path) -> None:
    model, _ = load_model(str(_model_dir(tmp_path, "DeepSeek-V3.json")))
    assert (model.kv_heads, model.head_dim, model.kv_lora_rank, model.qk_rope_head_dim) == (1, 576, 512, 64)
    assert (model.qk_head_dim, model.v_head_dim) == (192, 128)
    assert model.active_params == pytest.approx(37e9, rel=0.03)
    # FP8 linear weights, bf16 embeddings: just over 1 byte per parameter.
    assert 1.0 <= model.weight_bytes_per_param < 1.02


def test_moe_active_params_and_mxfp4_weights(tmp_path: Path) -> None:
    model, _ = load_model(str(_model_dir(tmp_path, "gpt-oss-20b.json")))
    assert (model.num_experts, model.experts_per_token) == (32, 4)
    assert model.active_params < model.params / 4
    # The published checkpoint is ~13.8 GB: MXFP4 experts at 4.25 bits, the rest in bf16.
    assert model.weight_bytes == pytest.approx(13.8e9, rel=0.03)


def test_head_dim_and_kv_heads_fall_back() -> None:
    cfg = {
        "num_hidden_layers": 2,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "max_position_embeddings": 512,
    }
    model = geometry_from_config(cfg, "tiny", "test")
    assert (model.kv_heads, model.head_dim, model.attention) == (4, 64, "mha")
    assert model.kv_bytes_per_token == 2 * 2 * 4 * 64 * 2


def test_multimodal_config_reads_text_config() -> None:
    inner = {"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2}
    cfg = {"architectures": ["SomeVLM"], "text_config": {**inner, "max_position_embeddings": 8192}}
    model = geometry_from_config(cfg, "vlm", "test")
    assert (model.layers, model.kv_heads, model.max_context) == (4, 2, 8192)


def test_float32_checkpoints_are_served_in_16_bit() -> None:
    cfg = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "max_position_embeddings": 64}
    model = geometry_from_config({**cfg, "torch_dtype": "float32"}, "f32", "test")
    assert (model.dtype, model.dtype_bytes) == ("bfloat16", 2)


def test_qwen2_use_sliding_window_applies_above_max_window_layers() -> None:
    cfg = json.loads((CONFIGS / "Qwen2.5-7B-Instruct.json").read_text())
    cfg.update(use_sliding_window=True, sliding_window=4096, max_window_layers=20)
    model = geometry_from_config(cfg, "qwen-swa", "test")
    assert (model.full_attention_layers, model.sliding_layers, model.sliding_window) == (20, 8, 4096)


@pytest.mark.parametrize(("key", "value"), [("max_seq_len", 65536), ("model_max_length", 1048576)])
def test_the_context_length_from_the_other_keys_vllm_reads(key: str, value: int) -> None:
    # Step 3's and Kimi Linear's config.json (scripts/sweep-architectures): no max_position_embeddings.
    cfg = {**json.loads((CONFIGS / "Llama-3.1-8B.json").read_text()), key: value}
    del cfg["max_position_embeddings"]
    assert geometry_from_config(cfg, "other-key", "test").max_context == value


def test_no_context_key_is_vllms_2048() -> None:
    # vllm/config/model.py: "Assuming the model's maximum length is 2048" (Bloom's ALiBi config).
    cfg = json.loads((CONFIGS / "Llama-3.1-8B.json").read_text())
    del cfg["max_position_embeddings"]
    assert geometry_from_config(cfg, "no-context", "test").max_context == DEFAULT_MAX_CONTEXT == 2048


def test_no_layer_count_at_all_names_the_key() -> None:
    cfg = json.loads((CONFIGS / "Llama-3.1-8B.json").read_text())
    del cfg["num_hidden_layers"]
    with pytest.raises(ModelConfigError, match="num_hidden_layers"):
        geometry_from_config({**cfg, "layers_block_type": []}, "no-layers", "test")


def test_heads_are_optional_only_for_attention_free_families() -> None:
    cfg = {**edge_config("mamba"), "model_type": "llama"}
    with pytest.raises(ModelConfigError, match="num_attention_heads"):
        geometry_from_config(cfg, "headless", "test")


# The key shapes the reader refused before vLLM was asked (docs/models.md, "What the sweep found"):
# name -> (layers, heads, KV heads, head_dim, max context, layers by kind, state page with a float32
# SSM state as vLLM keeps it on the CPU (tests/fixtures/engine_spec/<name>.json), experts).
READER_SHAPES = {
    "bloom": (4, 4, 4, 64, 2048, "4 full-attention", 0, None),
    "mamba": (4, 0, 0, 0, 2048, "4 state-space", 35840, None),
    "mamba2": (4, 0, 0, 0, 2048, "4 state-space", 36032, None),
    "falcon-mamba": (4, 0, 0, 0, 2048, "4 state-space", 35840, None),
    "nemotron-h": (4, 4, 2, 64, 16384, "1 full-attention + 1 state-space", 36032, (4, 2)),
    "dbrx": (4, 4, 2, 64, 16384, "4 full-attention", 0, (4, 2)),
}


@pytest.mark.parametrize("name", sorted(READER_SHAPES))
def test_the_key_shapes_the_reader_once_refused(name: str) -> None:
    layers, heads, kv_heads, head_dim, context, summary, page, experts = READER_SHAPES[name]
    geo = geometry_from_config(edge_config(name), name, "test")
    assert (geo.layers, geo.heads, geo.kv_heads, geo.head_dim) == (layers, heads, kv_heads, head_dim)
    assert (geo.max_context, geo.layer_summary()) == (context, summary)
    assert geo.state_page_bytes(ssm_float32=True) == page
    assert (geo.num_experts, geo.experts_per_token) == (experts or (None, None))
    assert geo.kv_bytes_per_token == geo.full_attention_layers * 2 * kv_heads * head_dim * 2


@pytest.mark.parametrize("name", ["mamba", "mamba2", "falcon-mamba", "nemotron-h", "dbrx"])
def test_the_reader_matches_the_engines_answer(name: str) -> None:
    """What the reader estimates for these families is what vLLM 0.32 answered for them."""
    spec = recorded_spec(name)
    geo = geometry_from_config(edge_config(name), name, "test")
    if spec.refused:  # Nemotron-H on the CPU: its relu2 MLP (is_act_and_mul=False) needs a GPU
        assert spec.stage == "model" and "is_act_and_mul" in (spec.reason or "")
        return
    checked = apply_engine_spec(geo, spec)
    assert checked.layer_summary() == geo.layer_summary()
    assert checked.kv_bytes_per_token == geo.kv_bytes_per_token
    assert checked.state_page_bytes() == geo.state_page_bytes(ssm_float32=True)
    assert spec.max_model_len == geo.max_context


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_hidden_layers": None}, "num_hidden_layers"),
        ({"num_attention_heads": -1}, "num_attention_heads"),
        ({"num_attention_heads": None}, "num_attention_heads"),
        ({"max_position_embeddings": 0}, "max_position_embeddings"),
        ({"hidden_size": "4096"}, "hidden_size"),
    ],
)
def test_bad_fields_name_the_field(change: dict[str, object], field: str) -> None:
    cfg = {**json.loads((CONFIGS / "Llama-3.1-8B.json").read_text()), **change}
    with pytest.raises(ModelConfigError, match=field) as info:
        geometry_from_config(cfg, "bad", "test")
    assert info.value.exit_code == 2


def test_config_file_path_means_its_directory(tmp_path: Path) -> None:
    d = _model_dir(tmp_path, "Qwen3-32B.json")
    model, path = load_model(str(d / "config.json"))
    assert path == str(d.resolve()) and model.layers == 64


def test_bundled_demo_model_loads() -> None:
    model, path = load_model(str(profiles_dir() / "demo"))
    assert (model.layers, model.kv_heads, model.head_dim) == (2, 2, 64)
    assert model.kv_bytes_per_token == 2 * 2 * 2 * 64 * 2
    assert path == str((profiles_dir() / "demo").resolve())


def test_directory_without_config_json(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match=r"has no config\.json"):
        load_model(str(tmp_path))


def test_config_json_that_is_not_json(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{ not json")
    with pytest.raises(ModelConfigError, match="is not JSON"):
        load_model(str(tmp_path))


def test_config_json_that_is_not_an_object(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ModelConfigError, match="JSON object"):
        load_model(str(tmp_path))


def test_unknown_model_lists_the_choices() -> None:
    with pytest.raises(ModelConfigError) as info:
        load_model("someorg/not-a-model")
    assert "unknown model" in info.value.message
    for name in ("llama-3.1-8b", "deepseek-v3", "gpt-oss-120b"):
        assert name in info.value.message
    assert info.value.hint


def test_missing_local_path_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="does not exist"):
        load_model(str(tmp_path / "nope"))


@pytest.mark.parametrize(
    ("spec", "name", "repo"),
    [
        ("llama-3.1-8b", "llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct"),
        ("META-LLAMA/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct"),
        ("deepseek-ai/DeepSeek-R1", "deepseek-r1", "deepseek-ai/DeepSeek-R1"),
        ("openai/gpt-oss-120b", "gpt-oss-120b", "openai/gpt-oss-120b"),
        ("Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B"),
    ],
)
def test_catalog_names_aliases_and_repo_ids(spec: str, name: str, repo: str) -> None:
    model, path = load_model(spec)
    assert (model.name, model.source, path) == (name, "catalog", repo)


def test_catalog_reference_numbers() -> None:
    def geo(name: str) -> ModelGeometry:
        entry = find_catalog_entry(name)
        assert entry is not None
        return entry.geometry()

    assert geo("llama-3.1-8b").kv_bytes_per_token == 128 * KIB
    seventy = geo("llama-3.1-70b")
    assert seventy.kv_bytes_per_token == 320 * KIB
    assert seventy.kv_bytes_per_token * 128 * 1024 == 40 * GIB  # "~40 GB per user" at 128K
    assert geo("deepseek-v3").kv_bytes_per_token == 70272
    assert geo("deepseek-v3").weight_dtype == "fp8"
    assert geo("gpt-oss-120b").weight_bytes == pytest.approx(65e9, rel=0.03)
    assert geo("llama-3.1-405b-fp8").weight_bytes < geo("llama-3.1-405b").weight_bytes * 0.55


def test_catalog_covers_the_required_families_with_unique_names() -> None:
    names = catalog_names()
    required = [
        "llama-3.1-8b",
        "llama-3.1-70b",
        "llama-3.1-405b",
        "llama-3.3-70b",
        "qwen2.5-7b",
        "qwen2.5-72b",
        "qwen3-32b",
        "qwen3-235b-a22b",
        "deepseek-v3",
        "deepseek-r1",
        "mistral-7b",
        "gpt-oss-20b",
        "gpt-oss-120b",
    ]
    assert set(required) <= set(names)
    every = [n.lower() for e in load_catalog() for n in e.names()]
    assert len(every) == len(set(every)), "a name or alias appears twice"


@pytest.mark.parametrize("entry", load_catalog(), ids=lambda e: e.name)
def test_published_params_agree_with_the_shapes(entry: object) -> None:
    from kvstack.model.catalog import CatalogEntry

    assert isinstance(entry, CatalogEntry)
    estimate = geometry_from_config(entry.config, entry.name, "catalog")
    published = entry.geometry()
    assert published.params == pytest.approx(estimate.params, rel=0.03)
    assert published.active_params == pytest.approx(estimate.active_params, rel=0.2)
    assert published.max_context >= 32768


def test_profiles_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = json.loads((CONFIGS / "Mistral-7B-v0.1.json").read_text())
    (tmp_path / "models.yaml").write_text(
        json.dumps({"models": [{"name": "my-model", "repo_id": "me/my-model", "config": cfg}]})
    )
    monkeypatch.setenv("KVSTACK_PROFILES", str(tmp_path))
    assert profiles_dir() == tmp_path.resolve()
    assert catalog_names() == ["my-model"]
    model, path = load_model("me/my-model")
    assert (model.name, path, model.sliding_layers) == ("my-model", "me/my-model", 32)


def test_malformed_catalog_is_a_model_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "models.yaml").write_text("models:\n  - name: x\n")
    monkeypatch.setenv("KVSTACK_PROFILES", str(tmp_path))
    with pytest.raises(ModelConfigError, match=r"models\.yaml"):
        load_model("x")


def test_a_local_checkpoints_files_give_the_weight_size(tmp_path: Path) -> None:
    d = _model_dir(tmp_path, "Llama-3.1-8B.json")
    estimate = load_model(str(d))[0]
    assert estimate.checkpoint_bytes is None
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 16_060_522_496}}))
    model, _ = load_model(str(d))
    assert model.weight_bytes == model.checkpoint_bytes == 16_060_522_496
    assert model.weight_bytes == pytest.approx(estimate.weight_bytes, rel=0.02)  # the estimate was close


def _quantized(quant: dict[str, object]) -> ModelGeometry:
    cfg = json.loads((CONFIGS / "Llama-3.1-8B.json").read_text())
    return geometry_from_config({**cfg, "quantization_config": quant}, "q", "test")


def _ct(num_bits: int, kind: str, group_size: int | None) -> dict[str, object]:
    weights = {"num_bits": num_bits, "type": kind, "group_size": group_size, "strategy": "group"}
    return {"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": weights}}}


@pytest.mark.parametrize(
    ("quant", "dtype", "linear_bytes"),
    [
        ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8", 1.0),
        ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "int4", 0.5 * 1.03),
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4", 0.5 * 1.03),
        ({"quant_method": "awq", "w_bit": 4}, "int4", 0.5 * 1.03),
        (_ct(8, "float", None), "fp8", 1.0),
        (_ct(8, "int", None), "int8", 1.0),
        (_ct(4, "int", 128), "int4", (4 + 16 / 128) / 8),
        (_ct(4, "float", 16), "nvfp4", 4.5 / 8),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4", 4.5 / 8),
        ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, "nf4", 0.515),
    ],
)
def test_quantized_checkpoints_count_as_stored(
    quant: dict[str, object], dtype: str, linear_bytes: float
) -> None:
    model = _quantized(quant)
    assert model.weight_dtype == dtype
    embeddings = 2 * 128256 * 4096  # untied embeddings and lm_head stay in bf16
    linear = model.params - embeddings
    assert model.weight_bytes == pytest.approx(linear * linear_bytes + embeddings * 2, rel=0.001)


def test_gemma3n_per_layer_lists_and_shared_kv_layers() -> None:
    """(a) of issue #49: Gemma 3n's intermediate_size is a list per layer (TypeError before), and its
    last num_kv_shared_layers layers read an earlier layer's KV and keep none."""
    geo = geometry_from_config(edge_config("gemma3n"), "gemma3n", "test")
    assert (geo.sliding_layers, geo.full_attention_layers) == (2, 1)
    assert geo.layer_kinds_source is not None and "num_kv_shared_layers" in geo.layer_kinds_source
