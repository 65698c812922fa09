"""One typed spec per KV connector (``spec.ConnectorSpec``), one module each; ``spec_of`` finds one.

Adding a connector: its module here with its ``SPEC``, its name in ``kvstack/names.py``, its
renderer in ``kvstack/engines`` (``@register(engine, connector)``), and its tests.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvstack.connectors import hicache, lmcache, lmcache_mp, native, none
from kvstack.connectors.spec import ConnectorSpec
from kvstack.errors import InputError
from kvstack.names import Engine, Platform

SPECS: Mapping[str, ConnectorSpec] = {
    s.name: s for s in (none.SPEC, lmcache.SPEC, lmcache_mp.SPEC, native.SPEC, hicache.SPEC)
}


def spec_of(name: str) -> ConnectorSpec:
    """The spec of connector ``name``; InputError for a name kvstack does not know."""
    found = SPECS.get(name)
    if found is None:
        raise InputError(f"unknown connector {name!r}", hint="choose from: " + ", ".join(SPECS))
    return found


def offloading(engine: str) -> tuple[ConnectorSpec, ...]:
    """The connectors ``engine`` runs that move KV below its pool, in the order --offload lists them."""
    return tuple(s for s in SPECS.values() if s.offloads and engine in s.engines)


def auto_order(engine: Engine, platform: Platform) -> tuple[ConnectorSpec, ...]:
    """What --offload auto may take for ``engine`` on ``platform``, most preferred first."""
    ranked = [s for s in SPECS.values() if (engine, platform) in s.auto_rank]
    return tuple(sorted(ranked, key=lambda s: s.auto_rank[(engine, platform)]))


def remote_capable() -> tuple[ConnectorSpec, ...]:
    return tuple(s for s in SPECS.values() if s.remote)
