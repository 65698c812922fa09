"""Traces of real traffic (Mooncake JSONL): reading, session sampling and block scaling.

Pure data in, pure data out; the capacity simulation lives in kvstack/planning/predict/capacity.py and
the timed replay in kvstack/bench/replay.
"""
