"""connectors/spec.py TransferOverlap: which tiers' transfers each connector runs beside the forward
step (the step-level simulator's ``overlapped``), each within the tiers it serves and citing its code."""

from __future__ import annotations

import pytest

from kvstack.connectors import SPECS, spec_of


@pytest.mark.parametrize("name", sorted(SPECS))
def test_each_connectors_overlap_is_within_its_tiers_and_sourced(name: str) -> None:
    spec = spec_of(name)
    o = spec.overlap
    assert o.loads <= spec.tiers and o.stores <= spec.tiers
    assert o.source or not spec.tiers  # every connector with tiers says where its code says so


def test_what_the_installed_code_says() -> None:
    # LMCache in-process retrieves before the forward and blocks on the copy into its CPU buffer.
    assert spec_of("lmcache").overlap.loads == frozenset()
    assert spec_of("lmcache").overlap.stores == frozenset({"disk", "remote"})
    # LMCache's server, vLLM's native offloading and HiCache move KV off the step.
    for name in ("lmcache-mp", "native", "hicache"):
        spec = spec_of(name)
        assert spec.overlap.loads == spec.overlap.stores == spec.tiers
    assert spec_of("none").overlap.loads == frozenset()
