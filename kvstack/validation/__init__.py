"""Parts of the TTFT validation pass: unique prompts, log diagnosis, evidence from metrics."""
