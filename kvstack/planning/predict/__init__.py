"""Predicting a layout's figures: TTFT (ttft, trace_ttft, served_ttft), break-even lengths
(breakeven), the measured figures the predictions take (calibrated), the LRU capacity curve and the
hierarchy's hits (capacity), what a trace's tiers serve and whether offload pays on it
(trace_sizing), and capacity under a TTFT SLO (bound, plan_capacity, served_capacity). Pure.

Choosing the layout (the connector, tiers, dtype, TP size, the plan itself) is planning/'s other
modules; they ask here for the figures. The direction is one way: a module here imports its
siblings and the plan's data types (planning.schema, planning.trace_schema, planning.kv), never a
choosing module (tests/unit/test_layers.py holds it)."""
