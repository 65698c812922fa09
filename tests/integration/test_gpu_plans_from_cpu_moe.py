"""The other half of the GPU plans made on this CPU machine for released quantized checkpoints
(tests/integration/test_gpu_plans_from_cpu.py says what is checked): the large MoE ones, Kimi K2.5's
compressed-tensors and an AWQ checkpoint."""

from __future__ import annotations

import pytest

from tests.integration.test_gpu_plans_from_cpu import MOE
from tests.support.quantized_plans import Plans, check_formats, check_weights, plans_of


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> Plans:
    return plans_of(MOE, tmp_path_factory.mktemp("engine-spec"))


def test_every_format_plans_on_h100_h200_and_b200(plans: Plans) -> None:
    check_formats(plans)


def test_weights_are_the_index_total_or_the_formats_bits(plans: Plans) -> None:
    check_weights(plans)
