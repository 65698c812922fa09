"""`kvstack bench`: what measures a server. bench.py is the use case; a synthetic workload runs
through workload_run.py (workloads, runner, stats, report), a load sweep through sweep/, and a
production trace through replay/ (trace replay, trace sweeps, the costs calibrated from it)."""
