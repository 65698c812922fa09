from __future__ import annotations

import ctypes

import pytest

from kvstack.hardware import nvml
from kvstack.hardware.nvml import NOT_SUPPORTED, NvmlCallError, PynvmlBackend, StaticNvml, query

from .fixtures import NVML_DEVICES, nvml_fixture


def _driver_library_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def test_query_turns_nvml_errors_into_reasons() -> None:
    def lost() -> int:
        raise NvmlCallError("GPU is lost")

    assert query(lost) == (None, "GPU is lost")
    assert query(lambda x: x + 1, 41) == (42, None)


def test_query_lets_other_errors_through() -> None:
    # Only NVML failures are facts about the machine; a bug must still surface.
    def bug() -> int:
        raise KeyError("oops")

    with pytest.raises(KeyError):
        query(bug)


@pytest.mark.parametrize("name", NVML_DEVICES)
def test_fixture_backends_answer_every_field(name: str) -> None:
    backend = nvml_fixture(name)
    assert backend.device_count() >= 1
    for field in nvml.DEVICE_FIELDS:
        value, reason = query(backend.device, 0, field)
        assert (value is None) == (reason is not None), field
        if reason is not None:
            assert reason == NOT_SUPPORTED  # the only error real devices give for these fields


def test_static_init_failure_fails_every_call() -> None:
    backend = StaticNvml({"init_error": "Driver Not Loaded", "devices": []})
    assert query(backend.device_count) == (None, "Driver Not Loaded")
    assert query(backend.driver_version) == (None, "Driver Not Loaded")


def test_open_backend_on_this_machine_matches_the_driver_library() -> None:
    backend, reason = nvml.open_backend()
    if _driver_library_present():
        # The library loads: a backend, or an NVML error (no driver loaded, no device), not "absent".
        assert backend is not None or (reason is not None and reason != nvml.NO_DRIVER)
    else:
        assert backend is None
        assert reason == nvml.NO_DRIVER
        assert nvml.is_absent(reason)
    # Initialised once: a second call hands back the very same outcome.
    assert nvml.open_backend() == (backend, reason)


def test_pynvml_backend_translates_errors_from_the_real_module() -> None:
    import pynvml

    backend, _reason = nvml.open_backend()
    if backend is not None:
        pytest.skip("NVML initialised here (a GPU machine): uninitialised errors cannot be provoked")
    # Without nvmlInit every call fails with NVML's "Uninitialized": the backend must turn
    # pynvml's exception into NvmlCallError so that query() can report it.
    value, why = query(PynvmlBackend(pynvml).device_count)
    assert value is None
    assert why == str(pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED))


def test_is_absent_distinguishes_missing_stack_from_faults() -> None:
    assert nvml.is_absent(nvml.NO_DRIVER)
    assert nvml.is_absent(nvml.NO_BINDINGS)
    assert not nvml.is_absent("NVML failed to initialise: RM has detected an NVML/RM version mismatch.")
    assert not nvml.is_absent(None)
