"""The replay tests share the bench tests' fixtures: the demo model's real tokenizer, a real
streaming server."""

from tests.unit.bench.conftest import demo_tokenizer_path, server

__all__ = ["demo_tokenizer_path", "server"]
