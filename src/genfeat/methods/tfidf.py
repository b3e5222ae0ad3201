"""The floor users check first: TF-IDF features and a linear model (scikit-learn), on the task splits the
fine-tuning runner uses (genfeat.tasks, the same seeded subsets), scored with the same metrics.

Recipe: ``method: tfidf`` plus the fields of :class:`TfidfRecipe`. TF-IDF of word n-grams (sublinear tf,
rows L2-normalised, so a dot product is a cosine) is fitted on the training texts only; a passage or context
that several questions share counts once. Per kind of task:

- single text: the text's vector x_A; pair and similarity: [x_A, x_B, x_A ⊙ x_B, cos(x_A, x_B)] (the element-wise
  product marks the n-grams the two texts share, which a linear model over the two vectors alone cannot see; the
  cosine, their sum, is the one number a similarity baseline starts from, which the regularised weights of ~10^5
  product features do not add up to: STS-B dev Pearson 0.232 without it).
  Classification: logistic regression (L2, ``c`` the inverse regularisation strength); regression (STS-B):
  ridge regression (``alpha``).
- multiple choice (RACE): one row per (passage p, question q, option o), see :func:`_choice_features`; a
  binary logistic regression learns correct vs wrong options, and the prediction is the option of highest
  score (argmax over the k options).
- span (SQuAD): retrieval, then a span ranker. The context sentence of highest TF-IDF cosine to the
  question is retrieved; every span of at most ``max_span_words`` words in it is a candidate, scored by a
  logistic regression over the features of :func:`_span_features`, trained on the candidates of the
  sentence that holds the gold answer (gold span positive, every other negative); the answer is the
  best-scoring candidate of the retrieved sentence. Every question is answered (no unanswerable output).

Result: ``dev_<metric>`` (and ``test_<metric>`` for a labelled test split), example counts, ``features`` (TF-IDF
n-grams), ``seconds``. Nothing is trained step by step, so there is no checkpoint and no ``--resume``; with
``--out`` the figures go to OUT/results.json.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np

from ..config import Config, check_least
from ..errors import ConfigError
from ..io import write_results
from ..runner import register_method
from ..tasks import Example, TaskSpec, get_task, load_task
from .finetune import scores, subset

# a word or a single non-space symbol (span candidates are runs of these)
_WORD = re.compile(r"\w+|[^\w\s]")
# a sentence ends at . ! or ? (and closing quotes or brackets) before white space; abbreviations split too
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")
# the question type: its leftmost wh-word ("how many" and "how much" before "how")
_WH = re.compile(r"\b(how many|how much|what|which|who|whom|whose|when|where|why|how)\b")


@dataclass
class TfidfRecipe(Config):
    """TF-IDF + a linear model on a task."""

    task: str = "sst2"
    """Task name (genfeat.tasks.TASKS): single-text, pair, similarity, multiple-choice or span tasks."""
    train_split: str = "train"
    dev_split: str = "dev"
    test_split: str | None = None
    """Split reported as ``test_*`` when it is labelled (None: none)."""
    max_train_examples: int = 0
    """Train on the seeded subset of this many examples that fine-tuning's ``data.max_train_examples`` draws (0: all)."""
    max_eval_examples: int = 0
    """Score the seeded subset of this many dev/test examples that fine-tuning's ``data.max_eval_examples`` draws (0: all)."""
    squad_seed: int = 0
    """Seed of the SQuAD article split (squad_split)."""
    ngram_max: int = 2
    """Word n-grams of length 1 .. ngram_max."""
    min_df: int = 2
    """Keep n-grams seen in at least this many training texts."""
    max_features: int = 200000
    """Keep at most this many n-grams (the most frequent)."""
    lowercase: bool = True
    """Lower-case the texts first."""
    c: float = 1.0
    """Logistic regression: inverse L2 regularisation strength."""
    alpha: float = 1.0
    """Ridge regression (regression tasks): L2 strength."""
    max_span_words: int = 10
    """Span tasks: longest candidate answer in words (96% of the squad_split training answers fit in 10)."""

    def __post_init__(self):
        check_least(self, max_train_examples=0, max_eval_examples=0, ngram_max=1, min_df=1, max_features=1,
                    max_span_words=1)
        if not (self.c > 0 and self.alpha > 0):   # NaN too
            raise ValueError(f"c ({self.c}) and alpha ({self.alpha}) must be positive")


def _logistic(cfg: TfidfRecipe, seed: int):
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=cfg.c, max_iter=2000, random_state=seed)


def _fit_texts(spec: TaskSpec, examples: Sequence[Example]) -> list[str]:
    """The texts the TF-IDF is fitted on: every text field and option, a shared passage or context once."""
    if spec.transform == "multiple_choice":
        return [*dict.fromkeys(ex.texts[0] for ex in examples), *(t for ex in examples for t in (ex.texts[1], *ex.choices))]
    if spec.transform == "span":
        return [*dict.fromkeys(ex.texts[1] for ex in examples), *(ex.texts[0] for ex in examples)]
    return [t for ex in examples for t in ex.texts]


def _sentences(text: str) -> list[tuple[int, int]]:
    """Character ranges of the sentences of ``text`` (split by ``_SENTENCE_END``)."""
    cuts = [0, *(m.end() for m in _SENTENCE_END.finditer(text)), len(text)]
    return [(a, b) for a, b in pairwise(cuts) if text[a:b].strip()]


# ----------------------------------------------------------------------------- single, pair, similarity
class _TextFloor:
    """[x_A] or [x_A, x_B, x_A ⊙ x_B, cos(x_A, x_B)] with logistic or ridge regression."""

    def __init__(self, cfg: TfidfRecipe, spec: TaskSpec, vectorizer, seed: int):
        from sklearn.linear_model import Ridge

        self.vectorizer, self.pair = vectorizer, spec.transform != "single"
        self.model = Ridge(alpha=cfg.alpha) if spec.regression else _logistic(cfg, seed)

    def _features(self, examples: Sequence[Example]):
        from scipy.sparse import hstack

        a = self.vectorizer.transform([ex.texts[0] for ex in examples])
        if not self.pair:
            return a
        b = self.vectorizer.transform([ex.texts[1] for ex in examples])
        shared = a.multiply(b)
        return hstack([a, b, shared, shared.sum(axis=1)]).tocsr()   # rows are unit length: the sum is the cosine

    def fit(self, examples: Sequence[Example]) -> None:
        self.model.fit(self._features(examples), [ex.label for ex in examples])

    def predict(self, examples: Sequence[Example]) -> list:
        return self.model.predict(self._features(examples)).tolist()


# ------------------------------------------------------------------------------------ multiple choice
def _choice_features(vectorizer, examples: Sequence[Example]):
    """One row per (passage p, question q, option o), the n·k rows of a question's k options together.

    With p, q, o the TF-IDF vectors (unit length) and s_1 .. s_m those of the passage's sentences:

    - o ⊙ p and o ⊙ q: which of the option's n-grams the passage and the question contain, weighted, so
      the model learns how much a shared n-gram counts (an option copied from the question is rarely right);
    - o: the option's own n-grams (options such as "all of the above" or "not mentioned" have priors);
    - scalars: cos(o, p), cos(o, q); max_i cos(q + o, s_i), the best single sentence for the question read
      with the option (the sliding-window baseline of MCTest, Richardson et al. 2013, one sentence wide);
      cos(o, s*) with s* the sentence closest to the question; log(1 + words in o).

    Only differences between a question's options decide the argmax, so every feature is taken relative to
    the mean over that question's k options: the binary logistic regression then compares the options of a
    question instead of learning how easy the question is.

    Shapes: returns a CSR matrix of n·k rows.
    """
    from scipy.sparse import csr_matrix, eye, hstack, kron

    k = len(examples[0].choices)
    passages = list(dict.fromkeys(ex.texts[0] for ex in examples))
    owner = {p: i for i, p in enumerate(passages)}
    P = vectorizer.transform(passages)
    rows = np.repeat(np.arange(len(examples)), k)
    Pr = P[[owner[examples[r].texts[0]] for r in rows]]
    Qr = vectorizer.transform([ex.texts[1] for ex in examples])[rows]
    O = vectorizer.transform([o for ex in examples for o in ex.choices])
    QO = vectorizer.transform([f"{ex.texts[1]} {o}" for ex in examples for o in ex.choices])
    op, oq = O.multiply(Pr).tocsr(), O.multiply(Qr).tocsr()
    best_window, near_question = np.zeros(len(rows)), np.zeros(len(rows))
    by_passage: list[list[int]] = [[] for _ in passages]
    for r in range(len(rows)):
        by_passage[owner[examples[rows[r]].texts[0]]].append(r)
    for p, rs in zip(passages, by_passage):
        S = vectorizer.transform([p[a:b] for a, b in _sentences(p)])
        best_window[rs] = (QO[rs] @ S.T).toarray().max(axis=1)
        closest = (Qr[rs] @ S.T).toarray().argmax(axis=1)
        near_question[rs] = np.asarray(O[rs].multiply(S[closest]).sum(axis=1)).ravel()
    n_words = np.array([len(_WORD.findall(o)) for ex in examples for o in ex.choices])
    scalars = np.column_stack([np.asarray(op.sum(axis=1)).ravel(), np.asarray(oq.sum(axis=1)).ravel(),
                               best_window, near_question, np.log1p(n_words)])
    X = hstack([op, oq, O, csr_matrix(scalars)]).tocsr()
    mean = kron(eye(len(examples), format="csr"), np.full((k, k), 1 / k), format="csr")
    return (X - mean @ X).tocsr()


class _ChoiceFloor:
    """Binary logistic regression over :func:`_choice_features`; the answer is the argmax over options."""

    def __init__(self, cfg: TfidfRecipe, spec: TaskSpec, vectorizer, seed: int):
        self.vectorizer, self.model = vectorizer, _logistic(cfg, seed)

    def fit(self, examples: Sequence[Example]) -> None:
        k = len(examples[0].choices)
        self.model.fit(_choice_features(self.vectorizer, examples),
                       [int(j == ex.label) for ex in examples for j in range(k)])

    def predict(self, examples: Sequence[Example]) -> list[int]:
        score = self.model.decision_function(_choice_features(self.vectorizer, examples))
        return score.reshape(len(examples), -1).argmax(axis=1).tolist()


# ----------------------------------------------------------------------------------------------- span
def _span_features(words: list[str], question: str, max_words: int) -> list[tuple[tuple[int, int], dict]]:
    """The candidate spans (i, j) (words i..j, at most ``max_words``) of a sentence with their features.

    With w the question's wh-word (``_WH``; "other" when it has none), the features of a span are:
    its length; w paired with the span's first and last word and the words just before and after it (a
    "when" answer tends to follow "in" and start with a digit); w paired with the span's word shape (X a
    capitalised word, d one with a digit, x other words, p a symbol; repeats merged: "Xx", "d"); the share
    of its words that the question holds (answers rarely repeat the question); 1 / (1 + the distance in words
    to the nearest content word of the question outside the span) (answers sit next to the words the question
    matches). Content words: not in scikit-learn's English stop-word list.
    """
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    m = _WH.search(question.lower())
    wh = m.group(1) if m else "other"
    asked = {w for w in _WORD.findall(question.lower()) if w.isalnum()}
    lower = [w.lower() for w in words]
    matched = [w in asked and w not in ENGLISH_STOP_WORDS for w in lower]
    shape = ["p" if not w[0].isalnum() else "d" if any(ch.isdigit() for ch in w) else "X" if w[0].isupper() else "x"
             for w in words]
    far = len(words) + 1
    left, right, last = [far] * len(words), [far] * len(words), None
    for i, hit in enumerate(matched):  # left[i]: words back to the nearest match before i
        left[i] = far if last is None else i - last
        last = i if hit else last
    last = None
    for i in range(len(words) - 1, -1, -1):
        right[i] = far if last is None else last - i
        last = i if matched[i] else last
    out = []
    for i in range(len(words)):
        for j in range(i, min(i + max_words, len(words))):
            merged = "".join(s for n, s in enumerate(shape[i:j + 1]) if n == 0 or s != shape[i + n - 1])
            out.append(((i, j), {f"len={j - i + 1}": 1.0, f"{wh}|first={lower[i]}": 1.0, f"{wh}|last={lower[j]}": 1.0,
                                 f"{wh}|before={lower[i - 1] if i else '<s>'}": 1.0,
                                 f"{wh}|after={lower[j + 1] if j + 1 < len(words) else '</s>'}": 1.0,
                                 f"{wh}|shape={merged}": 1.0,
                                 "in_question": sum(w in asked for w in lower[i:j + 1]) / (j - i + 1),
                                 "near_question": 1 / (1 + min(left[i], right[j]))}))
    return out


class _SpanFloor:
    """Sentence retrieval by TF-IDF cosine, then a logistic-regression span ranker (module docstring)."""

    def __init__(self, cfg: TfidfRecipe, spec: TaskSpec, vectorizer, seed: int):
        from sklearn.feature_extraction import DictVectorizer

        self.vectorizer, self.model, self.max_words = vectorizer, _logistic(cfg, seed), cfg.max_span_words
        self.dict_vectorizer = DictVectorizer()

    @staticmethod
    def _words(context: str, sentence: tuple[int, int]) -> list[tuple[int, int]]:
        return [m.span() for m in _WORD.finditer(context, *sentence)]

    def _retrieve(self, ex: Example) -> tuple[int, int]:
        """The character range of the context sentence of highest TF-IDF cosine to the question."""
        question, context = ex.texts
        sentences = _sentences(context)
        S = self.vectorizer.transform([context[a:b] for a, b in sentences])
        return sentences[int((S @ self.vectorizer.transform([question]).T).toarray().argmax())]

    def fit(self, examples: Sequence[Example]) -> None:
        feats, labels = [], []
        for ex in examples:
            if not ex.answers:
                continue
            question, context = ex.texts
            start = ex.answers[0][1]
            sentence = next((a, b) for a, b in _sentences(context) if a <= start < b)
            offsets = self._words(context, sentence)
            gold = set()  # the gold answers that lie inside the sentence, as word spans
            for text, s in ex.answers:
                inside = [n for n, (a, b) in enumerate(offsets) if a < s + len(text) and b > s]
                if inside and sentence[0] <= s and s + len(text) <= sentence[1]:
                    gold.add((inside[0], inside[-1]))
            for span, f in _span_features([context[a:b] for a, b in offsets], question, self.max_words):
                feats.append(f)
                labels.append(int(span in gold))
        self.model.fit(self.dict_vectorizer.fit_transform(feats), labels)

    def predict(self, examples: Sequence[Example]) -> list[str]:
        preds = []
        for ex in examples:
            question, context = ex.texts
            offsets = self._words(context, self._retrieve(ex))
            candidates = _span_features([context[a:b] for a, b in offsets], question, self.max_words)
            score = self.model.decision_function(self.dict_vectorizer.transform([f for _, f in candidates]))
            i, j = candidates[int(score.argmax())][0]
            preds.append(context[offsets[i][0]:offsets[j][1]])
        return preds


_FLOORS = {"single": _TextFloor, "pair": _TextFloor, "similarity": _TextFloor, "multiple_choice": _ChoiceFloor,
           "span": _SpanFloor}


@register_method("tfidf", TfidfRecipe)
def run(cfg: TfidfRecipe, *, seed: int, out_dir: Path | None, progress: bool = True,
        resume: bool = False) -> dict[str, float]:
    from sklearn.feature_extraction.text import TfidfVectorizer

    if resume:
        raise ConfigError("method tfidf keeps no checkpoint, so there is nothing to resume", "run it again without --resume")
    spec = get_task(cfg.task)
    spec.check_run_splits(cfg.train_split, cfg.dev_split, cfg.test_split)   # the fine-tuning runner's checks
    t0 = time.time()
    train = subset(load_task(spec, cfg.train_split, seed=cfg.squad_seed), cfg.max_train_examples)
    vectorizer = TfidfVectorizer(ngram_range=(1, cfg.ngram_max), min_df=cfg.min_df, max_features=cfg.max_features,
                                 lowercase=cfg.lowercase, sublinear_tf=True)
    texts = _fit_texts(spec, train)
    try:
        vectorizer.fit(texts)
    except ValueError as e:     # e.g. min_df above the number of texts: scikit-learn finds no vocabulary
        raise ConfigError(f"the {len(texts)} training texts give no vocabulary with min_df {cfg.min_df} ({e})",
                          "lower min_df, or train on more examples (max_train_examples)") from None
    floor = _FLOORS[spec.transform](cfg, spec, vectorizer, seed)
    floor.fit(train)
    figures: dict[str, float] = {"train_examples": len(train), "features": len(vectorizer.vocabulary_)}
    for prefix, split in (("dev", cfg.dev_split), ("test", cfg.test_split)):
        if split is None:
            continue
        examples = subset(load_task(spec, split, seed=cfg.squad_seed), cfg.max_eval_examples)
        figures.update({f"{prefix}_{k}": v for k, v in scores(spec, examples, floor.predict(examples)).items()})
        figures[f"{prefix}_examples"] = len(examples)
    figures["seconds"] = time.time() - t0
    if out_dir is not None:
        write_results(out_dir, figures)
    return figures
