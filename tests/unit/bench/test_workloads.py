from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from kvstack.bench.text import TextBuilder, pool_words
from kvstack.bench.tokenize import EstimateTokenizer, LocalTokenizer
from kvstack.bench.workloads import (
    WORKLOADS,
    TierSizes,
    WorkloadSpec,
    build_workload,
    tier_sizes_from_metrics,
    tier_sizes_from_plan,
)
from kvstack.clients.metrics import parse_metrics
from kvstack.errors import WorkloadError
from kvstack.planning.schema import Plan
from tests.support.deps import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "metrics"
PLANS = ROOT / "tests" / "golden" / "plans"
TIERS = TierSizes(gpu_tokens=6000)


@pytest.fixture(scope="module")
def estimate() -> TextBuilder:
    return TextBuilder(EstimateTokenizer())


@pytest.fixture
def demo(demo_tokenizer_path: Path) -> tuple[TextBuilder, LocalTokenizer]:
    tok = LocalTokenizer(demo_tokenizer_path)
    return TextBuilder(tok), tok


def _build(b: TextBuilder, name: str, **kw: int) -> list[tuple[str, int]]:
    w = build_workload(WorkloadSpec(name=name, **kw), b, TIERS)  # type: ignore[arg-type]
    return [(r.prompt, r.prompt_tokens) for r in w.requests]


def test_sizes_and_rounds(estimate: TextBuilder) -> None:
    w = build_workload(WorkloadSpec("random", requests=10, prompt_tokens=300), estimate)
    assert len(w.requests) == 10 and w.round_labels == ("main",)
    assert {r.prompt_tokens for r in w.requests} == {300}

    w = build_workload(WorkloadSpec("long-doc-qa", requests=12, prompt_tokens=400), estimate)
    assert w.round_labels == ("warm-up", "query")
    assert w.shape["documents"] == 6
    rounds = w.rounds()
    assert len(rounds[0]) == 6 and len(rounds[1]) == 6
    assert {r.group for r in rounds[0]} == {r.group for r in rounds[1]}  # each document asked again

    w = build_workload(WorkloadSpec("multi-turn", requests=12, prompt_tokens=300, turns=3), estimate)
    assert w.shape["users"] == 4 and len(w.requests) == 12
    assert [r.turn for r in w.requests] == [0] * 4 + [1] * 4 + [2] * 4

    w = build_workload(
        WorkloadSpec("shared-prefix", requests=9, prompt_tokens=500, suffix_tokens=20), estimate
    )
    assert [len(r) for r in w.rounds()] == [1, 8]
    assert all(r.prompt_tokens == 500 for r in w.requests)


def test_same_seed_same_prompts_other_seed_other_prompts(estimate: TextBuilder) -> None:
    for name in WORKLOADS:
        a = _build(estimate, name, requests=8, prompt_tokens=200, seed=3)
        assert a == _build(estimate, name, requests=8, prompt_tokens=200, seed=3), name
        b = _build(estimate, name, requests=8, prompt_tokens=200, seed=4)
        assert {p for p, _ in a}.isdisjoint({p for p, _ in b}), name


def test_prompts_are_token_exact_with_the_demo_tokenizer(demo: tuple[TextBuilder, LocalTokenizer]) -> None:
    builder, tok = demo
    assert builder.additive  # ByteLevel BPE splits on spaces before merging
    for name in WORKLOADS:
        w = build_workload(WorkloadSpec(name, requests=12, prompt_tokens=600), builder, TIERS)
        assert w.exact
        counts = tok.count([r.prompt for r in w.requests])
        assert counts == [r.prompt_tokens for r in w.requests], name
        assert min(counts) >= 600, name  # multi-turn grows, the others are exactly 600
        assert all(r.prompt_tokens == 600 for r in w.requests if r.turn in (None, 0)), name


def test_non_additive_tokenizer_is_fitted_per_prompt(demo_tokenizer_path: Path, tmp_path: Path) -> None:
    """A Llama-2-style SentencePiece layout: a prefix marker at the start makes counts non-additive."""
    import random

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    rng = random.Random(1)
    corpus = [" ".join(rng.choice(pool_words()) for _ in range(20)) for _ in range(1500)]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>"]))
    # Llama 2's tokenizer.json: no pre-tokenizer, the normalizer prepends the marker.
    tok.pre_tokenizer = None  # type: ignore[assignment]
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.save(str(tmp_path / "tokenizer.json"))
    local = LocalTokenizer(tmp_path / "tokenizer.json")
    builder = TextBuilder(local)
    assert not builder.additive
    for name in WORKLOADS:
        w = build_workload(WorkloadSpec(name, requests=8, prompt_tokens=300), builder, TIERS)
        assert local.count([r.prompt for r in w.requests]) == [r.prompt_tokens for r in w.requests]
        assert all(r.prompt_tokens == 300 for r in w.requests if r.turn in (None, 0)), name


def test_miss_prompts_differ_from_the_first_token(demo: tuple[TextBuilder, LocalTokenizer]) -> None:
    from tokenizers import Tokenizer

    builder, tok = demo
    n = min(len(builder.singles), 40)
    w = build_workload(WorkloadSpec("random", requests=n, prompt_tokens=64), builder)
    hf = Tokenizer.from_file(str(tok.path))
    first = [hf.encode(r.prompt, add_special_tokens=False).ids[0] for r in w.requests]
    assert len(set(first)) == n
    # Documents of long-doc-qa too: each is a miss in the warm-up round.
    w = build_workload(WorkloadSpec("long-doc-qa", requests=2 * n, prompt_tokens=64), builder)
    first = [hf.encode(r.prompt, add_special_tokens=False).ids[0] for r in w.rounds()[0]]
    assert len(set(first)) == n
    assert all(r.shared_prefix_tokens == 0 for r in w.rounds()[0])


def test_nonces_stay_unique_beyond_the_first_word(estimate: TextBuilder) -> None:
    n = len(estimate.singles) * 3  # more prompts than one-token words: the next words disambiguate
    w = build_workload(WorkloadSpec("random", requests=n, prompt_tokens=32), estimate)
    width = estimate.nonce_width(n)
    heads = {tuple(r.prompt.split()[:width]) for r in w.requests}
    assert len(heads) == n


def test_multi_turn_history_grows_and_is_reused(estimate: TextBuilder) -> None:
    spec = WorkloadSpec("multi-turn", users=3, turns=4, prompt_tokens=300, turn_tokens=50, answer_tokens=20)
    w = build_workload(spec, estimate)
    system = w.shape["system_tokens"]
    assert system == 250
    for u in range(3):
        turns = [r for r in w.requests if r.group == f"user{u}"]
        assert [r.turn for r in turns] == [0, 1, 2, 3]
        for prev, cur in itertools.pairwise(turns):
            assert cur.prompt.startswith(prev.prompt)  # the whole previous prompt is the history
            assert cur.prompt_tokens == prev.prompt_tokens + 20 + 50  # + answer + new message
            assert cur.shared_prefix_tokens == prev.prompt_tokens
    starts = {r.prompt[:200] for r in w.requests}
    assert len(starts) == 1  # one system prompt shared by every user
    assert all(r.shared_prefix_tokens == 0 for r in w.requests if r.turn == 0)


def test_tier_overflow_exceeds_the_gpu_pool(estimate: TextBuilder) -> None:
    tiers = TierSizes(gpu_tokens=5000)
    w = build_workload(WorkloadSpec("tier-overflow", prompt_tokens=500, question_tokens=20), estimate, tiers)
    fill, reread = w.rounds()
    assert sum(r.prompt_tokens - 20 for r in fill) > tiers.gpu_tokens
    assert int(w.shape["working_set_tokens"]) >= 1.5 * tiers.gpu_tokens
    assert [r.group for r in fill] == [r.group for r in reread]  # same order: LRU evicts the first
    assert all(r.shared_prefix_tokens == 480 for r in reread)


def test_tier_overflow_exceeds_the_cpu_tier_when_a_disk_tier_exists(estimate: TextBuilder) -> None:
    tiers = TierSizes(gpu_tokens=2000, cpu_tokens=6000, has_disk=True)
    w = build_workload(WorkloadSpec("tier-overflow", prompt_tokens=500), estimate, tiers)
    assert int(w.shape["working_set_tokens"]) > tiers.gpu_tokens + 6000
    no_disk = build_workload(
        WorkloadSpec("tier-overflow", prompt_tokens=500), estimate, TierSizes(2000, 6000)
    )
    assert int(no_disk.shape["working_set_tokens"]) < int(w.shape["working_set_tokens"])


def test_tier_sizes_from_a_plan() -> None:
    plan = Plan.model_validate(json.loads((PLANS / "8x-h100__llama-3.1-70b__rag.json").read_text()))
    sizes = tier_sizes_from_plan(plan)
    gpu, cpu = plan.tier("gpu"), plan.tier("cpu")
    assert gpu is not None and cpu is not None and plan.tier("disk") is not None
    assert (sizes.gpu_tokens, sizes.cpu_tokens, sizes.has_disk) == (gpu.tokens, cpu.tokens, True)
    assert sizes.capacity_to_overflow == gpu.tokens + cpu.tokens
    infeasible = Plan.model_validate(
        json.loads((PLANS / "h100-sxm__llama-3.1-70b__infeasible.json").read_text())
    )
    with pytest.raises(WorkloadError):
        tier_sizes_from_plan(infeasible)


def test_tier_sizes_from_server_metrics() -> None:
    vllm = tier_sizes_from_metrics(parse_metrics((FIXTURES / "vllm_server_demo.prom").read_text()))
    assert vllm is not None and vllm.gpu_tokens == 8192 * 128 and vllm.cpu_tokens is None
    sglang = tier_sizes_from_metrics(parse_metrics((FIXTURES / "sglang_after_tier.prom").read_text()))
    assert sglang is not None and sglang.gpu_tokens == 262144
    assert tier_sizes_from_metrics(parse_metrics("")) is None


def test_tier_overflow_without_sizes_says_what_to_pass(estimate: TextBuilder) -> None:
    with pytest.raises(WorkloadError, match="GPU pool") as exc:
        build_workload(WorkloadSpec("tier-overflow"), estimate, None)
    assert exc.value.hint and "--plan" in exc.value.hint


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (WorkloadSpec("nope"), "unknown workload"),
        (WorkloadSpec("random", requests=0), "--requests"),
        (WorkloadSpec("random", prompt_tokens=0), "--prompt-tokens"),
        (WorkloadSpec("random", output_tokens=0), "--output-tokens"),
    ],
)
def test_bad_specs_are_input_errors(estimate: TextBuilder, spec: WorkloadSpec, match: str) -> None:
    with pytest.raises(WorkloadError, match=match) as exc:
        build_workload(spec, estimate)
    assert exc.value.exit_code == 2 and exc.value.hint
