"""Token counting for bench prompts, behind one small protocol.

Three sources, best first: the served model's own tokenizer through the server's ``POST /tokenize``
(vLLM: vllm/entrypoints/serve/tokenize/protocol.py, ``{"model", "prompt", "add_special_tokens"}`` ->
``{"count", "tokens", ...}``), the model's local ``tokenizer.json`` through the ``tokenizers`` package,
or a words-per-token estimate when neither is available. Counts exclude special tokens (BOS) that
the server adds, so a prompt of N tokens is reported by the server as N plus its specials.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import httpx

from kvstack.clients.client import IDLE_KEEPALIVE_S, auth_headers, trusts_env
from kvstack.jsonvalue import JsonObject


class Tokenizer(Protocol):
    """Counts the tokens of texts. ``exact`` is False for the estimate."""

    @property
    def source(self) -> str: ...

    @property
    def exact(self) -> bool: ...

    def count(self, texts: Sequence[str]) -> list[int]: ...


class EstimateTokenizer:
    """A words-per-token estimate for when no tokenizer is reachable.

    The bench's word pool holds short common English words, which are single tokens in the common
    BPE vocabularies (Llama 3, Qwen, GPT), so one word per token is the default.
    """

    exact = False

    def __init__(self, words_per_token: float = 1.0) -> None:
        self.words_per_token = words_per_token
        self.source = f"estimate ({words_per_token:g} words per token)"

    def count(self, texts: Sequence[str]) -> list[int]:
        return [math.ceil(len(t.split()) / self.words_per_token) for t in texts]


class LocalTokenizer:
    """The model's own ``tokenizer.json`` through the ``tokenizers`` package."""

    exact = True

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as HfTokenizer  # optional package: imported only when used

        self.path = path
        self.source = f"local {path}"
        self._tok: Any = HfTokenizer.from_file(str(path))

    def count(self, texts: Sequence[str]) -> list[int]:
        encoded = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return [len(e.ids) for e in encoded]


class ServerTokenizer:
    """The served model's tokenizer through ``POST {base_url}/tokenize`` (vLLM, SGLang)."""

    exact = True

    def __init__(self, base_url: str, model: str | None, api_key: str | None = None, timeout_s: float = 30.0):
        self.url = base_url.rstrip("/") + "/tokenize"
        self.source = f"server {self.url}"
        self.model = model
        self._headers = auth_headers(api_key)
        self._client = httpx.Client(
            timeout=timeout_s,
            trust_env=trusts_env(base_url),
            limits=httpx.Limits(keepalive_expiry=IDLE_KEEPALIVE_S),
        )
        self._specials: int | None = None

    def _one(self, text: str) -> int:
        body: JsonObject = {"prompt": text, "add_special_tokens": False}
        if self.model:
            body["model"] = self.model
        resp = self._client.post(self.url, json=body, headers=self._headers)
        resp.raise_for_status()
        data = resp.json()
        count = data.get("count")
        if not isinstance(count, int):
            tokens = data.get("tokens")
            if not isinstance(tokens, list):
                raise ValueError(f"{self.url} answered without 'count' or 'tokens'")
            count = len(tokens)
        return count

    def specials(self) -> int:
        """Tokens the server adds to any prompt although asked not to (BOS); subtracted from counts."""
        if self._specials is None:
            try:
                self._specials = self._one("")
            except (httpx.HTTPError, ValueError):
                self._specials = 0  # a server that refuses the empty prompt
        return self._specials

    def count(self, texts: Sequence[str]) -> list[int]:
        base = self.specials()
        return [self._one(t) - base for t in texts]

    def close(self) -> None:
        self._client.close()


def server_tokenizer(base_url: str, model: str | None, api_key: str | None = None) -> ServerTokenizer | None:
    """A ServerTokenizer when the server answers ``/tokenize`` sensibly, else None."""
    tok = ServerTokenizer(base_url, model, api_key, timeout_s=10.0)
    try:
        if tok.count(["hello world"])[0] > 0:
            return tok
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        pass
    tok.close()
    return None


def local_tokenizer(model: str | None) -> LocalTokenizer | None:
    """A LocalTokenizer when ``model`` is a directory (or file) with tokenizer.json and the package exists."""
    if not model:
        return None
    path = Path(model).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    if path.name != "tokenizer.json" or not path.is_file():
        return None
    try:
        return LocalTokenizer(path)
    except ImportError:
        return None
    except Exception:  # a corrupt or foreign tokenizer.json: fall back to the next source
        return None


def resolve_tokenizer(base_url: str | None, model: str | None, api_key: str | None = None) -> Tokenizer:
    """The best tokenizer available: the server's, then the local files, then the estimate."""
    if base_url:
        tok = server_tokenizer(base_url, model, api_key)
        if tok is not None:
            return tok
    local = local_tokenizer(model)
    if local is not None:
        return local
    return EstimateTokenizer()
