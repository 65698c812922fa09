from __future__ import annotations

from pathlib import Path

from kvstack.bench.tokenize import (
    EstimateTokenizer,
    LocalTokenizer,
    ServerTokenizer,
    local_tokenizer,
    resolve_tokenizer,
)
from tests.support.stream_server import ServerKnobs, StreamServer


def test_estimate_counts_words_per_token() -> None:
    assert EstimateTokenizer().count(["a b c", " one two", ""]) == [3, 2, 0]
    assert EstimateTokenizer(words_per_token=0.75).count(["a b c"]) == [4]  # ceil(3 / 0.75)
    assert not EstimateTokenizer().exact


def test_local_tokenizer_counts_without_special_tokens(demo_tokenizer_path: Path) -> None:
    from tokenizers import Tokenizer

    tok = LocalTokenizer(demo_tokenizer_path)
    text = " the cache key value block"
    expected = len(Tokenizer.from_file(str(demo_tokenizer_path)).encode(text, add_special_tokens=False).ids)
    assert tok.count([text]) == [expected]
    assert tok.exact


def test_local_tokenizer_found_from_a_model_directory(demo_tokenizer_path: Path, tmp_path: Path) -> None:
    found = local_tokenizer(str(demo_tokenizer_path.parent))
    assert found is not None and found.path == demo_tokenizer_path
    assert local_tokenizer(str(tmp_path)) is None  # no tokenizer.json there
    (tmp_path / "tokenizer.json").write_text("{not json")
    assert local_tokenizer(str(tmp_path)) is None  # corrupt: falls back


def test_server_tokenizer_subtracts_what_the_server_adds(server: StreamServer) -> None:
    # The test server adds BOS even when asked not to; counts must still be the text's own.
    tok = ServerTokenizer(server.url, "demo-model")
    try:
        assert tok.count(["one two three", " four"]) == [3, 1]
    finally:
        tok.close()


def test_resolve_prefers_server_then_local_then_estimate(demo_tokenizer_path: Path) -> None:
    model_dir = str(demo_tokenizer_path.parent)
    with StreamServer(ServerKnobs()) as srv:
        assert resolve_tokenizer(srv.url, model_dir).source.startswith("server ")
    with StreamServer(ServerKnobs(tokenize=False)) as srv:
        assert resolve_tokenizer(srv.url, model_dir).source.startswith("local ")
        assert resolve_tokenizer(srv.url, "not-a-dir").source.startswith("estimate")


def test_server_tokenizer_sends_the_api_key() -> None:
    with StreamServer(ServerKnobs(api_key="sekrit-key")) as srv:
        assert resolve_tokenizer(srv.url, "m", api_key=None).source.startswith("estimate")
        assert resolve_tokenizer(srv.url, "m", api_key="sekrit-key").source.startswith("server ")
