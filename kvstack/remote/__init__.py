"""The shared remote KV tier (Redis and LMCache's lm:// server): URLs, preflight, doctor checks."""
