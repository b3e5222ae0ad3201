"""Intrinsic evaluation of word vectors: word similarity (WordSim-353) and analogies (questions-words).

Both follow gensim 4's ``KeyedVectors.evaluate_word_pairs`` / ``evaluate_word_analogies`` with their
defaults (``case_insensitive=True``, ``restrict_vocab=300000``), so a model scored here and in gensim
gets the same figures:

- Case-insensitive lookup: a test word matches the most frequent vocabulary word equal to it up to case
  (the vocabulary is ordered by frequency).
- Similarity (Finkelstein et al. 2002): Spearman's ρ between the human scores and the cosine
  similarities of the pairs whose two words are in the first ``restrict`` words of the vocabulary.
- Analogies (Mikolov et al. 2013a, 3CosAdd): for a : b :: c : ?, the answer is the word w among the
  first ``restrict`` words, other than a, b and c, with the highest cos(w, b − a + c) on unit vectors;
  questions with a word outside them are skipped. Accuracy: correct / questions asked, over all sections.

Also the nearest neighbours of a word by cosine (:func:`nearest_neighbours`, ``genfeat neighbours``).

The test files ship with gensim (``gensim/test/test_data``); :func:`gensim_test_file` finds them.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor

from ..errors import ConfigError, DataError


def gensim_test_file(name: str) -> Path | None:
    """``gensim/test/test_data/NAME`` of the installed gensim, or None without gensim (or the file)."""
    import importlib.util

    # found without importing gensim, which takes seconds
    spec = importlib.util.find_spec("gensim")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "test" / "test_data" / name
    return path if path.is_file() else None


def _case_insensitive_index(words: list[str], restrict: int) -> dict[str, int]:
    """upper-cased word -> index of its most frequent form among the first ``restrict`` words."""
    index: dict[str, int] = {}
    for i, w in enumerate(words[:restrict]):
        index.setdefault(w.upper(), i)
    return index


def _unit(vectors: Tensor) -> Tensor:
    v = vectors.detach().float()
    return v / v.norm(dim=1, keepdim=True).clamp_min(1e-12)


def _lines(path: str | Path) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read evaluation file '{path}' ({e})", "pass a readable UTF-8 text file") from None


def read_similarity_pairs(path: str | Path) -> list[tuple[str, str, float]]:
    """The (word1, word2, score) rows of a ``word1<TAB>word2<TAB>score`` file (``#`` lines are comments).

    Raises:
        DataError: the file cannot be read, or a line that is not three fields with a finite score (named by line).
    """
    pairs = []
    for number, line in enumerate(_lines(path), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        try:
            score = float(parts[2]) if len(parts) == 3 else math.nan
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise DataError(f"'{path}' line {number} ({line[:60]!r}) is not word1<TAB>word2<TAB>score with a finite "
                            "score", "pass a word-pair file such as wordsim353.tsv, or fix the line")
        pairs.append((parts[0], parts[1], score))
    return pairs


def read_analogy_questions(path: str | Path) -> list[list[str]]:
    """The ``a b c d`` questions (upper-cased) of a questions-words file (``: section`` lines are headers).

    Raises:
        DataError: the file cannot be read, or a line that is not four words (named by line).
    """
    questions = []
    for number, line in enumerate(_lines(path), 1):
        if not line.strip() or line.startswith(":"):
            continue
        parts = line.upper().split()
        if len(parts) != 4:
            raise DataError(f"'{path}' line {number} ({line[:60]!r}) is not 'a b c d'",
                            "pass a questions-words file, or fix the line")
        questions.append(parts)
    return questions


def word_similarity(vectors: Tensor, words: list[str], path: str | Path, restrict: int = 300000) -> dict[str, float]:
    """Spearman's ρ of cosine similarity against the human scores of a ``word1<TAB>word2<TAB>score`` file.

    Args:
        vectors: (V, d) word vectors, rows in vocabulary (frequency) order.
        words: the V words.
        path: the pairs file (lines starting with ``#`` are comments), e.g. wordsim353.tsv.
        restrict: only the first this many words count (default 300000, gensim's).
    Returns:
        ``spearman`` (nan when fewer than 2 pairs are known), ``pairs`` used and ``pairs_total``.
    """
    from scipy.stats import spearmanr

    index = _case_insensitive_index(words, restrict)
    unit = _unit(vectors)
    gold, sims = [], []
    pairs = read_similarity_pairs(path)
    for first, second, score in pairs:
        a, b = index.get(first.upper()), index.get(second.upper())
        if a is None or b is None:
            continue
        gold.append(score)
        sims.append(float(unit[a] @ unit[b]))
    rho = float(spearmanr(gold, sims).statistic) if len(gold) > 1 else float("nan")
    return {"spearman": rho, "pairs": len(gold), "pairs_total": len(pairs)}


def analogy_accuracy(vectors: Tensor, words: list[str], path: str | Path, restrict: int = 300000,
                     chunk: int = 1024) -> dict[str, float]:
    """3CosAdd accuracy on a questions-words file (``: section`` lines, then ``a b c d`` lines).

    Args:
        vectors: (V, d) word vectors, rows in vocabulary (frequency) order.
        words: the V words.
        path: the questions file.
        restrict: candidate answers and known words are the first this many words (default 300000).
        chunk: questions scored per matrix product (default 1024).
    Returns:
        ``accuracy`` (nan when no question is known), ``questions`` asked and ``questions_total``.
    """
    index = _case_insensitive_index(words, restrict)
    unit = _unit(vectors[: min(restrict, len(words))])
    asked = []
    questions = read_analogy_questions(path)
    total = len(questions)
    for parts in questions:
        ids = [index.get(p) for p in parts]
        if None not in ids:
            asked.append(ids)
    if not asked:
        return {"accuracy": float("nan"), "questions": 0, "questions_total": total}
    q = torch.tensor(asked)
    correct = 0
    for start in range(0, len(q), chunk):
        a, b, c, d = q[start:start + chunk].unbind(1)
        query = unit[b] - unit[a] + unit[c]  # (chunk, d); its norm does not change the ranking
        scores = query @ unit.T  # (chunk, V)
        rows = torch.arange(len(a))
        for excluded in (a, b, c):
            scores[rows, excluded] = -float("inf")
        correct += int((scores.argmax(1) == d).sum())
    return {"accuracy": correct / len(q), "questions": len(q), "questions_total": total}


def evaluate_vectors(vectors: Tensor, words: list[str], similarity_file: str | Path | None,
                     analogy_file: str | Path | None) -> dict[str, float]:
    """``spearman`` / ``analogy`` (and their coverage) for whichever of the two files is given."""
    out: dict[str, float] = {}
    if similarity_file:
        sim = word_similarity(vectors, words, similarity_file)
        out.update({"spearman": sim["spearman"], "similarity_pairs": sim["pairs"],
                    "similarity_pairs_total": sim["pairs_total"]})
    if analogy_file:
        ana = analogy_accuracy(vectors, words, analogy_file)
        out.update({"analogy": ana["accuracy"], "analogy_questions": ana["questions"],
                    "analogy_questions_total": ana["questions_total"]})
    return out


def nearest_neighbours(vectors: Tensor, words: list[str], word: str, top: int = 10) -> list[tuple[str, float]]:
    """The ``top`` words of highest cosine similarity to ``word`` (itself excluded).

    Args:
        vectors: (V, d) word vectors.
        words: the V words.
        word: the query.
        top: how many neighbours (default 10).
    Returns:
        [(word, cosine)] best first.
    Raises:
        ConfigError: ``word`` is not in the vocabulary.
    """
    index = {w: i for i, w in enumerate(words)}
    if word not in index:
        near = sorted(w for w in words if w.lower() == word.lower())
        hint = f" (the vocabulary has {', '.join(near[:3])})" if near else ""
        raise ConfigError(f"word {word!r} is not in the {len(words):,}-word vocabulary{hint}",
                          "ask for a word that occurs at least min_count times in the training corpus")
    unit = _unit(vectors)
    sims = unit @ unit[index[word]]
    sims[index[word]] = -float("inf")
    best = sims.topk(min(top, len(words) - 1))
    return [(words[i], float(s)) for s, i in zip(best.values.tolist(), best.indices.tolist())]
