"""Calibration: figures measured with torch on this machine (``kvstack doctor --calibrate``).

Importing this package never imports torch: the record and its accessors (``model``) are plain
pydantic, and ``run.calibrate`` imports torch and the measurement modules (copy, disk, prefill,
sanity) only when it is called.
"""

from kvstack.hardware.calibrate.model import Calibration, calibration_of, store_calibration

__all__ = ["Calibration", "calibration_of", "store_calibration"]
