"""Character vocabulary for ELMo's character CNN (Peters et al. 2018, §3.1; Kim et al. 2016).

Every word is spelled as a fixed-width row of ``max_chars`` character ids:
``[BOW, c_1, ..., c_n, EOW, PAD, ..., PAD]``. A word longer than ``max_chars - 2`` characters is
truncated to its first ``max_chars - 2`` characters (the end-of-word marker is kept), as the
original bilm-tf does; the row width is fixed so that a token's representation never depends on
the other tokens of its batch. A character the vocabulary has never seen is spelled as ``UNK``.

The vocabulary is built from the characters of a word vocabulary's symbols, most frequent
first, so a checkpoint needs no file of its own: the word vocabulary saved beside it rebuilds the
same character vocabulary (:meth:`CharVocab.from_words`).
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

import torch

from ..errors import ConfigError

PAD, BOW, EOW, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<bow>", "<eow>", "<unk-char>")


class CharVocab:
    """Character ids of the character CNN: 4 specials (``PAD``, ``BOW``, ``EOW``, ``UNK``), then characters.

    Args:
        chars: the characters, in id order (ids 4, 5, ...).
        max_chars: row width of a spelled word, the two markers included (>= 3).
    """

    def __init__(self, chars: Iterable[str], max_chars: int = 50):
        self.chars = list(chars)
        if max_chars < 3:
            raise ConfigError(f"max_chars is {max_chars}: no room for a character between the word markers",
                              "set model.max_chars to at least 3 (ELMo uses 50)")
        if any(len(c) != 1 for c in self.chars):
            raise ValueError("CharVocab holds single characters")
        self.index = {c: i + len(SPECIALS) for i, c in enumerate(self.chars)}
        self.max_chars = max_chars

    @classmethod
    def from_words(cls, words: Iterable[str], max_chars: int = 50) -> "CharVocab":
        """The characters of ``words`` (each word counted once), most frequent first, ties by code point."""
        counts = Counter(c for w in set(words) for c in w)
        if not counts:
            raise ConfigError("the word vocabulary has no characters to build a character vocabulary from",
                              "train on a corpus with at least one non-empty word")
        return cls(sorted(counts, key=lambda c: (-counts[c], c)), max_chars)

    def __len__(self) -> int:
        return len(SPECIALS) + len(self.chars)

    def spell(self, word: str) -> list[int]:
        """``max_chars`` ids: BOW, the word's characters (truncated to max_chars - 2, unknown ones UNK), EOW, PAD..."""
        body = [self.index.get(c, UNK) for c in word[: self.max_chars - 2]]
        row = [BOW, *body, EOW]
        return row + [PAD] * (self.max_chars - len(row))

    def spell_batch(self, sentences: list[list[str]]) -> torch.Tensor:
        """Spell a batch of tokenised sentences, right-padded with all-PAD tokens.

        Shapes: b sentences of up to t words -> [b, t, max_chars] long (an empty batch: [0, 0, max_chars]).
        """
        t = max((len(s) for s in sentences), default=0)
        out = torch.full((len(sentences), t, self.max_chars), PAD, dtype=torch.long)
        for i, sentence in enumerate(sentences):
            if sentence:
                out[i, : len(sentence)] = torch.tensor([self.spell(w) for w in sentence])
        return out

    def spell_table(self, words: list[str]) -> torch.Tensor:
        """Spelling of every word of a word vocabulary, row i for word id i: [V, max_chars] long.

        Indexing it with word ids spells a batch of ids (``table[word_ids]``: [b, t, max_chars]).
        """
        return torch.tensor([self.spell(w) for w in words], dtype=torch.long).view(len(words), self.max_chars)
