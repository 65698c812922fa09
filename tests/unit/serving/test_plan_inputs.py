from __future__ import annotations

from pathlib import Path

import pytest

from kvstack.errors import InputError
from kvstack.hardware.checks import DISK_MIN_BW
from kvstack.planning.request import PlanRequest
from kvstack.profiles import profiles_dir
from kvstack.serving.plan_inputs import PlanInputs, load_or_probe
from kvstack.serving.prepare import plan_request_of
from kvstack.serving.request import ServeRequest


def plan_request(**inputs: object) -> PlanRequest:
    return PlanInputs(model="m", **inputs).plan_request(None)  # type: ignore[arg-type]


def test_options_become_a_plan_request() -> None:
    asked = plan_request(engine="sglang", offload="lmcache", context="32k", retain="2TB", min_disk_bw="2GB")
    assert (asked.engine, asked.offload, asked.context) == ("sglang", "lmcache", 32768)
    assert (asked.retain_factor, asked.retain_bytes) == (None, 2 * 10**12)
    assert asked.min_disk_bw == 2e9
    assert plan_request().min_disk_bw == DISK_MIN_BW
    assert plan_request(retain="10").retain_factor == 10


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        ({"engine": "trt"}, "--engine"),
        ({"offload": "tape"}, "--offload"),
        ({"retain": "lots"}, "--retain"),
        ({"context": "long"}, "--context"),
        ({"min_disk_bw": "fast"}, "--min-disk-bw"),
    ],
)
def test_bad_options_name_their_flag(options: dict[str, str], flag: str) -> None:
    with pytest.raises(InputError, match=flag):
        plan_request(**options)  # type: ignore[arg-type]


def test_the_cache_dir_is_resolved_the_same_for_plan_and_serve(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    asked = plan_request(cache_dir=link, retain="3", min_disk_bw="500MB")
    assert asked.cache_root == str(real)
    served = plan_request_of(ServeRequest(cache_dir=link, retain="3", min_disk_bw="500MB"))
    assert served == asked


def test_a_given_snapshot_is_loaded_not_probed() -> None:
    path = profiles_dir() / "hardware" / "no-gpu.json"
    assert load_or_probe(path, None).gpus == []
