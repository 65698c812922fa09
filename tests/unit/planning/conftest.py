"""Fixtures for the planning tests."""

from __future__ import annotations

import pytest

from .helpers import PlanFor, plan_for


@pytest.fixture(name="plan_for")
def _plan_for() -> PlanFor:
    return plan_for
