"""The engine's answer parsed (model/engine_spec.py), and the block math kvstack does from it."""

from __future__ import annotations

import pytest

from kvstack.model.engine_spec import EngineKvSpec, spec_block_bytes, spec_blocks_per_request
from tests.support.engine_specs import recorded_spec

NAMES = ("demo", "gemma3-270m", "gemma3n", "falcon-h1", "lfm2")


@pytest.mark.parametrize("name", NAMES)
def test_blocks_per_request_at_the_probes_length_are_the_engines(name: str) -> None:
    spec = recorded_spec(name)
    assert spec.max_model_len is not None and spec.max_num_batched_tokens is not None
    for on in (True, False):
        layout = spec.layout(on)
        if layout is None or not layout.ok:
            continue
        got = spec_blocks_per_request(
            layout,
            spec.max_model_len,
            spec.max_num_batched_tokens,
            prefix_caching=True,
            probed_prefix_caching=spec.prefix_caching,
        )
        assert got == layout.blocks_per_request


def test_a_refusal_is_an_answer_and_a_failed_probe_is_not() -> None:
    refused = recorded_spec("qwen2-swa")
    assert refused.refused and refused.stage == "model"
    assert "Sliding window for some but all layers is not supported" in (refused.reason or "")
    broken = EngineKvSpec(vllm_version="0.32.0", ok=False, stage="probe", reason="ImportError")
    assert not broken.refused


def test_shared_layers_are_reported_and_hold_no_group() -> None:
    spec = recorded_spec("gemma3n")
    assert len(spec.shared_layers) == 3
    assert spec.manager_on is not None
    held = {name for g in spec.manager_on.groups for name in g.layer_names}
    assert not held & set(spec.shared_layers)


def test_state_groups_keep_their_blocks_and_pages_whatever_the_dtype() -> None:
    on = recorded_spec("falcon-h1").manager_on
    assert on is not None
    assert spec_block_bytes(on, 0.5) == on.bytes_per_block  # the state page does not halve
    # prefix caching off: one state block a request (mamba_cache_mode "none")
    off = spec_blocks_per_request(on, 16384, 2048, prefix_caching=False, probed_prefix_caching=True)
    assert off == on.blocks_per_request - 3 + 1
    demo = recorded_spec("demo").manager_on
    assert demo is not None and spec_block_bytes(demo, 0.5) == demo.bytes_per_block / 2


@pytest.mark.parametrize("name", NAMES)
def test_unchecked_keeps_every_field_but_the_block_check(name: str) -> None:
    spec = recorded_spec(name)
    assert spec.blocks_checked
    out = spec.unchecked()
    assert not out.blocks_checked
    # Every field, so that a field added to EngineKvSpec and not to unchecked() fails here.
    for field in EngineKvSpec.model_fields:
        if field != "blocks_checked":
            assert getattr(out, field) == getattr(spec, field), field
    assert out.model_dump(exclude={"blocks_checked"}) == spec.model_dump(exclude={"blocks_checked"})
