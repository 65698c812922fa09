"""Shared pieces of the bench tests: the demo model's real tokenizer, a real streaming server."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.deps import ROOT, missing
from tests.support.stream_server import ServerKnobs, StreamServer

DEMO_TOKENIZER = ROOT / "profiles" / "demo" / "tokenizer.json"


@pytest.fixture
def demo_tokenizer_path() -> Path:
    if importlib.util.find_spec("tokenizers") is None:
        missing("python package 'tokenizers'", "pip install tokenizers; scripts/test installs it")
    return DEMO_TOKENIZER


@pytest.fixture
def server() -> Iterator[StreamServer]:
    with StreamServer(ServerKnobs()) as srv:
        yield srv
