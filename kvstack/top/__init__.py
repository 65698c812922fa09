"""`kvstack top`: a live view of running servers and of each KV tier behind them.

targets.py finds what to watch (flags, or a `kvstack serve` run dir), sources.py scrapes it
(Prometheus /metrics, Redis INFO, the disk tier's directory, the run dir's canary.json), window.py
turns two scrapes into the rates, percentiles and warnings of one window (the JSON snapshot; the
canary's part from canary.py), and live.py takes one window or a window every interval. The
terminal view is rendering's (rendering/top.py, rendering/top_live.py).
"""
