"""Deterministic prompt text of an exact token length, built from a pool of common words.

Every piece of text is a run of `` word`` items (a space, then a word). Tokenizers that split on
whitespace before merging (ByteLevel BPE, the tiktoken-style regex of Llama 3 and Qwen) count such
text additively, so the token count of a prompt is the sum of the counts of its words: each pool
word is counted once and prompts are composed to the exact length without tokenizing every prompt.
``TextBuilder`` checks additivity on a sample; when it does not hold (SentencePiece adds a prefix
marker at the start), ``fit`` measures the whole prompt and pads or trims its last piece.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from kvstack.bench.tokenize import Tokenizer

# Short common words: single tokens in most BPE vocabularies, so prompts look like text and the
# estimate (one word per token) stays close. Digits and letters widen the single-token set for
# small vocabularies such as the demo model's.
_WORD_TEXT = """
the of and to in is was for on are with as be at by this from or have an they which one you were
her all she there would their will when who him been has more if no out so said what up its about
into than them can only other new some could time these two may then do first any my now such
like our over man me even most made after also did many before must through back years where much
your way well down should because each just those people how too little state good very make world
still own see men work long get here between both life being under never day same another know
while last might us great old year off come since against go came right used take three states
himself few house use during without again place around however home small found thought went say
part once general high upon school every does got united left number course war until always away
something fact though water less public put think almost hand enough far took head yet government
system better set told nothing night end why called did eyes find going look asked later knew
point next city business give group toward young days let room president side social given present
several order national possible rather second face per among form important often things looked
early white case john become large big need four within felt along children saw best church ever
least power development light thing seemed family interest want members others mind country area
cache key value block chunk token prefix prompt layer model serve tier memory disk host device
query answer document window request response stream batch queue engine server client page pool
"""
_WORDS = _WORD_TEXT.split()
_DIGITS = [str(d) for d in range(10)]
_LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]


def pool_words() -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for w in [*_WORDS, *_DIGITS, *_LETTERS]:
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


class TextBuilder:
    """Composes text of exact token lengths from the word pool, measured once per tokenizer."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        words = pool_words()
        # A word's cost inside text: count(" w w") - count(" w"). That removes what the tokenizer adds
        # at the start of a text (SentencePiece's prefix marker), which ``fit`` corrects per prompt.
        alone = tokenizer.count([" " + w for w in words])
        twice = tokenizer.count([f" {w} {w}" for w in words])
        costs = [b - a for a, b in zip(alone, twice, strict=True)]
        self.cost: dict[str, int] = {w: c for w, c in zip(words, costs, strict=True) if c > 0}
        self.words = [w for w in words if w in self.cost]
        self.singles = [w for w in self.words if self.cost[w] == 1]
        if not self.singles:
            # Without any one-token word no length can be hit exactly; treat every word as one
            # token and let ``fit`` correct the totals.
            self.singles = list(self.words)
            self.cost = {w: 1 for w in self.words}
        self.max_cost = max(self.cost.values())
        self.additive = self._check_additive()

    def _check_additive(self) -> bool:
        rng = random.Random(0)
        sample = [rng.choice(self.words) for _ in range(200)]
        text = "".join(" " + w for w in sample)
        return self.tokenizer.count([text])[0] == sum(self.cost[w] for w in sample)

    @property
    def exact(self) -> bool:
        return self.tokenizer.exact

    def words_text(self, words: Sequence[str]) -> str:
        return "".join(" " + w for w in words)

    def filler(self, tokens: int, rng: random.Random) -> str:
        """Random words adding up to ``tokens`` tokens (by the per-word counts)."""
        out: list[str] = []
        left = tokens
        # Draw in batches that cannot overshoot (k words of at most max_cost tokens each), then
        # finish with one-token words: fast for 100K-token documents, exact by construction.
        while left >= self.max_cost:
            batch = rng.choices(self.words, k=left // self.max_cost)
            out.extend(batch)
            left -= sum(self.cost[w] for w in batch)
        if left > 0:
            out.extend(rng.choices(self.singles, k=left))
        return self.words_text(out)

    def nonce_width(self, distinct: int) -> int:
        """Words a nonce needs so that ``distinct`` values stay distinct."""
        base = len(self.singles)
        width = 1
        while base**width < max(distinct, 2) * 1024:  # headroom for the random salt
            width += 1
        return width

    def nonce(self, value: int, width: int) -> str:
        """``value`` in base len(singles), least significant word FIRST.

        Consecutive values therefore differ at the first token, so prompts that must miss the cache
        are unique from their first token, not only somewhere inside the first block.
        """
        base = len(self.singles)
        value %= base**width
        out: list[str] = []
        for _ in range(width):
            value, digit = divmod(value, base)
            out.append(self.singles[digit])
        return self.words_text(out)

    def text(self, tokens: int, rng: random.Random, nonce: str = "") -> str:
        """``tokens`` tokens of text, starting with ``nonce`` when given."""
        head = self.measure(nonce) if nonce else 0
        return nonce + self.filler(max(0, tokens - head), rng)

    def measure(self, text: str) -> int:
        """Tokens of ``text`` by the additive rule (exact for pool text when ``additive``)."""
        return sum(self.cost.get(w, 1) for w in text.split())

    def fit(self, pieces: list[str], target: int, rng: random.Random) -> tuple[list[str], int]:
        """Make ``"".join(pieces)`` count ``target`` tokens by padding or trimming the last piece.

        Only needed for non-additive tokenizers; returns the pieces and the measured count.
        """
        if self.additive or not self.tokenizer.exact:
            return pieces, sum(self.measure(p) for p in pieces)
        for _ in range(8):
            count = self.tokenizer.count(["".join(pieces)])[0]
            diff = target - count
            if diff == 0:
                return pieces, count
            last = pieces[-1]
            if diff > 0:
                last = last + self.words_text([rng.choice(self.singles) for _ in range(diff)])
            else:
                words = last.split()
                last = self.words_text(words[: max(1, len(words) + diff)])
            pieces = [*pieces[:-1], last]
        return pieces, self.tokenizer.count(["".join(pieces)])[0]
