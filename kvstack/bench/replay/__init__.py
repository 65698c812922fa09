"""The trace replay: a production trace (Mooncake JSONL) replayed on served layouts, what each
tier served measured and predicted, and the engine costs calibrated from it (bench --trace, tune)."""
