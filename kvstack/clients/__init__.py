"""kvstack's HTTP clients of a served engine: JSON requests (client), streamed completions
(streaming), Prometheus scrapes (metrics), prompt tokens by source (token_sources), /v1/models
(models), and the per-run control token they carry on control routes (control)."""
