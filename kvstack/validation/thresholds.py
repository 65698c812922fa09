"""The validation pass's default thresholds, in one light module (the CLI imports it for --help).

- warm over cold, 1.5x: the engine's own prefix cache skips the whole prefill.
- each tier over its own recompute, 1.2x. Measured on this 2-core CPU machine (demo model,
  2048-token prompts): tier steps ran 1.4x-5.4x faster than recompute, the slowest (disk, on a
  busy machine) at 1.40x. The planner's break-even puts a tier's fetch at most at recompute's
  cost, so 1.0x is where offload stops paying; 1.2x asks for a margin over break-even that noise
  on a busy machine does not erase.
- correctness: 16 greedy tokens per cached request, each within 0.15 nats and the top 5 of a
  recompute's candidates (validation/correctness.py says why).
"""

DEFAULT_MIN_SPEEDUP = 1.5
DEFAULT_MIN_TIER_SPEEDUP = 1.2
DEFAULT_TOKENS = 16
DEFAULT_NOISE_NATS = 0.15
DEFAULT_TOP_K = 5
