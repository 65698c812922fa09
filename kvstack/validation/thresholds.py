"""The validation pass's default thresholds, in one light module (the CLI imports it for --help).

- warm over cold, 1.5x: the engine's own prefix cache skips the whole prefill.
- each tier over its own recompute, 1.2x. Measured on this 2-core CPU machine (demo model,
  2048-token prompts): tier steps ran 1.4x-5.4x faster than recompute, the slowest (disk, on a
  busy machine) at 1.40x. The planner's break-even puts a tier's fetch at most at recompute's
  cost, so 1.0x is where offload stops paying; 1.2x asks for a margin over break-even that noise
  on a busy machine does not erase.
- correctness: 16 greedy tokens per cached request, each scored by a recompute; the request's
  typical log-probability shift must stay within ``NOISE_RATIO`` times the noise floor measured on
  the same engine and model, never above ``DEFAULT_NOISE_CEILING`` (validation/noise.py and
  validation/correctness.py say why, with the figures that chose these numbers).
"""

DEFAULT_MIN_SPEEDUP = 1.5
DEFAULT_MIN_TIER_SPEEDUP = 1.2
DEFAULT_TOKENS = 16
DEFAULT_TOP_K = 5
# The gate is NOISE_RATIO x the measured floor, clamped to [NOISE_FLOOR_MIN, DEFAULT_NOISE_CEILING].
NOISE_RATIO = 4.0
NOISE_FLOOR_MIN = 0.05  # nats: an engine that is bit-exact between its paths still gets this much
DEFAULT_NOISE_CEILING = 0.5  # nats: a typical shift above this is never called numerics
TRIM_FRACTION = 0.125  # the largest 1/8 of a request's shifts are left out of its typical shift
