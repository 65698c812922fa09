"""kvstack: long-context LLM serving with KV-cache offloading that works on the first try."""

__version__ = "0.1.0"
