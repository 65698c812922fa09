"""What each export format deploys is read off the specs (ConnectorSpec.exports, EngineSpec.exports):
the formats they name exist, and each format deploys exactly the pairs whose specs name it."""

from __future__ import annotations

import pytest

from kvstack.connectors import SPECS
from kvstack.connectors.engines import ENGINE_SPECS
from kvstack.errors import UnsupportedError
from kvstack.export import FORMATS, export_plan
from kvstack.export.bundle import ExportOptions
from kvstack.export.deployment import lmcache_in
from tests.unit.export.plans import make_plan


def test_the_specs_name_only_formats_that_exist() -> None:
    for spec in (*SPECS.values(), *ENGINE_SPECS.values()):
        assert spec.exports <= set(FORMATS), spec.name
    # systemd runs kvstack serve, which runs every pair.
    assert all("systemd" in s.exports for s in (*SPECS.values(), *ENGINE_SPECS.values()))


def test_each_lmcache_mode_is_one_connector() -> None:
    assert lmcache_in("in-process").lmcache_mode == "in-process" and not lmcache_in("in-process").cache_server
    assert lmcache_in("mp").lmcache_mode == "mp" and lmcache_in("mp").cache_server
    modes = [s.lmcache_mode for s in SPECS.values() if s.lmcache_mode]
    assert sorted(modes) == ["in-process", "mp"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_format_deploys_the_pairs_its_specs_name_and_refuses_the_others(fmt: str) -> None:
    for engine in ENGINE_SPECS.values():
        for connector in SPECS.values():
            if engine.name not in connector.engines:
                continue
            plan = make_plan(engine=engine.name, connector=connector.name)
            if fmt in engine.exports and fmt in connector.exports:
                assert export_plan(fmt, plan, ExportOptions()).files, (engine.name, connector.name)
            else:
                with pytest.raises(UnsupportedError):
                    export_plan(fmt, plan, ExportOptions())
