"""Fixture factories for the renderer tests (the planner is written in parallel)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kvstack.hardware.snapshot import SoftwareInfo
from kvstack.planning.schema import Plan
from kvstack.runtime.specs import ServeOptions
from tests.unit.engines.cases import SOFTWARE, make_options, make_plan


@pytest.fixture
def plan_factory() -> Callable[..., Plan]:
    return make_plan


@pytest.fixture
def options_factory() -> Callable[..., ServeOptions]:
    return make_options


@pytest.fixture
def software() -> Callable[[str], SoftwareInfo]:
    def pick(name: str, **overrides: Any) -> SoftwareInfo:
        return SOFTWARE[name].model_copy(update=overrides)

    return pick
