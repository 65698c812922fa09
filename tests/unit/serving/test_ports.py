"""The port layout of a multi-replica launch: documented positions, no collisions, range checked."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvstack.errors import InputError, NetworkTargetError
from kvstack.runtime.specs import ServeOptions
from kvstack.serving.ports import port_layout


def test_one_replica_without_router_is_the_single_engine_layout() -> None:
    layout = port_layout(8000, 1, router=False)
    assert layout.engine_ports == (8000,)
    # ServeOptions leaves the LMCache MP ports to port+1 and port+2: the same ones.
    assert layout.helper_ports == ((8001, 8002),)
    assert layout.router_port is None and layout.router_metrics_port is None
    assert ServeOptions(cache_root="/c", run_dir="/r", python="py").lmcache_port is None


def test_replicas_without_router() -> None:
    layout = port_layout(8000, 3, router=False)
    assert layout.engine_ports == (8000, 8001, 8002)
    assert layout.helper_ports == ((8003, 8004), (8005, 8006), (8007, 8008))
    assert layout.all_ports() == list(range(8000, 8009))
    assert layout.replicas == 3


def test_replicas_with_router() -> None:
    layout = port_layout(9000, 2, router=True)
    assert layout.router_port == 9000
    assert layout.engine_ports == (9001, 9002)
    assert layout.router_metrics_port == 9003
    assert layout.helper_ports == ((9004, 9005), (9006, 9007))
    assert layout.to_dict() == {
        "router": 9000,
        "router_metrics": 9003,
        "engines": [9001, 9002],
        "lmcache_mp": [[9004, 9005], [9006, 9007]],
    }


def test_a_router_in_front_of_one_engine() -> None:
    layout = port_layout(8000, 1, router=True)
    assert (layout.router_port, layout.engine_ports, layout.router_metrics_port) == (8000, (8001,), 8002)


@given(port=st.integers(1, 60000), replicas=st.integers(1, 64), router=st.booleans())
def test_every_port_distinct_and_one_contiguous_block(port: int, replicas: int, router: bool) -> None:
    layout = port_layout(port, replicas, router)
    ports = layout.all_ports()
    assert len(ports) == len(set(ports))
    assert ports == list(range(port, port + len(ports)))
    assert len(ports) == replicas * 3 + (2 if router else 0)
    assert layout.base == port


def test_out_of_range_names_the_span_and_the_highest_port_that_fits() -> None:
    with pytest.raises(NetworkTargetError) as info:
        port_layout(65530, 2, router=True)
    err = info.value
    assert isinstance(err, InputError) and err.exit_code == 2
    assert (
        err.message == "--port 65530 with --replicas 2 and --router needs ports 65530-65537, beyond 1-65535"
    )
    assert err.hint == "choose a --port between 1 and 65528"
    assert max(port_layout(65528, 2, router=True).all_ports()) == 65535


def test_zero_replicas() -> None:
    with pytest.raises(NetworkTargetError, match="--replicas must be at least 1, not 0"):
        port_layout(8000, 0, router=False)
