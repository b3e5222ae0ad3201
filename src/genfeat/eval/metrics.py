"""Perplexity, bits per character and accuracy, computed exactly from summed losses and counts.

Objectives return ``LossOutput(loss_sum, count, logs)``; averaging per-batch means would weight a
short last batch like a full one, so every figure here is formed once from a total sum and a total
count, accumulated in float64 across batches (:class:`Totals`) and ranks (:meth:`Totals.all_reduce`).
Perplexity is capped at exp(:data:`MAX_LOG_PERPLEXITY`) = exp(50) ~ 5.2e21: a diverged model then reports
a finite figure (JSON has no infinity, and ``math.exp`` overflows past 709 nats) while its ``loss`` stays
exact. The held-out figures of every method (:func:`genfeat.eval.held_out.evaluate_objective`) and
``genfeat evaluate`` form their perplexities with :func:`perplexity`, so all share the one cap.

Target-task metrics are formed from a whole split's predictions: :func:`task_scores` (accuracy,
F1, Matthews correlation, Pearson, Spearman; scikit-learn and scipy) and :func:`squad_scores`
(exact match and token F1 under SQuAD's answer normalisation, the maximum over the gold answers).
"""

from __future__ import annotations

import math
import re
import string
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import torch

from ..errors import DataError
from ..framework.distributed import all_reduce_sum


def _check_count(count: float) -> None:
    if count <= 0:
        raise DataError("no predicted tokens or examples to score",
                        "give evaluation data with at least two tokens (or one labelled example)")


MAX_LOG_PERPLEXITY = 50.0
"""Largest mean negative log-likelihood (nats) that :func:`perplexity` exponentiates; above it the cap holds."""


def perplexity(loss_sum: float, count: float) -> float:
    """exp(min(loss_sum / count, MAX_LOG_PERPLEXITY)): perplexity of a summed negative log-likelihood in
    nats, capped at exp(50) (module doc)."""
    _check_count(count)
    return math.exp(min(loss_sum / count, MAX_LOG_PERPLEXITY))


def bits_per_token(loss_sum: float, count: float) -> float:
    """loss_sum / count / ln 2: mean negative log-likelihood in bits (bpc on character data)."""
    _check_count(count)
    return loss_sum / count / math.log(2)


def accuracy(correct: float, count: float) -> float:
    """correct / count, from summed correct predictions and a count."""
    _check_count(count)
    return correct / count


def lm_summary(loss_sum: float, count: float) -> dict[str, float]:
    """``loss`` (nats per predicted token), ``ppl`` and ``bpc`` of a summed loss."""
    _check_count(count)
    return {"loss": loss_sum / count, "ppl": perplexity(loss_sum, count), "bpc": bits_per_token(loss_sum, count)}


@dataclass
class Totals:
    """Exact running sums for LM and classification figures.

    Args:
        loss_sum: summed negative log-likelihood in nats (default 0).
        count: number of predicted tokens or examples (default 0).
        correct: number of correct predictions (default 0; only for accuracy).
        logs: further sums over the same items, by name (default none; e.g. the biLM's ``forward``
            and ``backward`` losses, from an objective's ``LossOutput.logs``).
    """

    loss_sum: float = 0.0
    count: float = 0.0
    correct: float = 0.0
    logs: dict[str, float] = field(default_factory=dict)

    def add(self, loss_sum: float | torch.Tensor, count: float | torch.Tensor,
            correct: float | torch.Tensor = 0.0, logs: Mapping[str, float] | None = None) -> Totals:
        """Add one batch (tensors are read as float64; ``logs`` adds to the sums of the same names); returns self."""
        self.loss_sum += float(torch.as_tensor(loss_sum, dtype=torch.float64))
        self.count += float(count)
        self.correct += float(correct)
        for name, value in (logs or {}).items():
            self.logs[name] = self.logs.get(name, 0.0) + float(value)
        return self

    def merge(self, other: Totals) -> Totals:
        """Sum of two totals (e.g. two shards of the data)."""
        logs = {k: self.logs.get(k, 0.0) + other.logs.get(k, 0.0) for k in {**self.logs, **other.logs}}
        return Totals(self.loss_sum + other.loss_sum, self.count + other.count, self.correct + other.correct, logs)

    def all_reduce(self) -> Totals:
        """Totals summed over all ranks when torch.distributed is initialised, else a copy (every rank
        must hold the same ``logs`` names)."""
        names = sorted(self.logs)
        loss_sum, count, correct, *logs = all_reduce_sum([self.loss_sum, self.count, self.correct,
                                                          *(self.logs[k] for k in names)])
        return Totals(loss_sum, count, correct, dict(zip(names, logs)))

    def lm(self) -> dict[str, float]:
        """``loss``, ``ppl``, ``bpc``, ``loss_sum`` and ``tokens`` of the totals."""
        return {**lm_summary(self.loss_sum, self.count), "loss_sum": self.loss_sum, "tokens": int(self.count)}

    def accuracy(self) -> float:
        """correct / count."""
        return accuracy(self.correct, self.count)


# ---- target-task metrics (GLUE, SQuAD): from whole-split predictions, not sums ----

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation (Rajpurkar et al. 2016, the official v1.1 evaluation): lower-case,
    drop ASCII punctuation (``string.punctuation``), drop the articles a, an, the as whole words,
    and collapse whitespace to single spaces."""
    text = "".join(c for c in text.lower() if c not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def squad_exact_match(prediction: str, golds: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals any normalised gold answer, else 0.0."""
    return max(float(normalize_answer(prediction) == normalize_answer(g)) for g in golds)


def _token_f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    common = sum((Counter(pred) & Counter(ref)).values())  # shared tokens, with multiplicity
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def squad_f1(prediction: str, golds: Sequence[str]) -> float:
    """Token-level F1 of the normalised prediction against the best-matching gold answer."""
    return max(_token_f1(prediction, g) for g in golds)


def squad_scores(predictions: Sequence[str], golds: Sequence[Sequence[str]]) -> dict[str, float]:
    """``exact_match`` and ``squad_f1`` averaged over questions, as fractions (the official script
    prints them times 100). A question with no gold answer (SQuAD 2.0) scores 1 for an empty
    prediction and 0 otherwise, as SQuAD 2.0's evaluation does."""
    _check_count(len(predictions))
    if len(predictions) != len(golds):
        raise DataError(f"{len(predictions)} predictions for {len(golds)} questions", "predict every question once")
    golds = [g if len(g) else [""] for g in golds]
    em = sum(squad_exact_match(p, g) for p, g in zip(predictions, golds)) / len(golds)
    f1 = sum(squad_f1(p, g) if any(g) else float(not normalize_answer(p)) for p, g in zip(predictions, golds))
    return {"exact_match": em, "squad_f1": f1 / len(golds)}


CORRELATION_METRICS = ("pearson", "spearman")
"""Task metrics that correlate predictions with labels: defined from 2 examples on."""


def task_scores(metrics: Sequence[str], predictions: Sequence, labels: Sequence) -> dict[str, float]:
    """The named metrics of whole-split predictions: ``accuracy``, ``f1`` (binary, positive class 1),
    ``matthews`` (Matthews correlation) with scikit-learn; ``pearson`` and ``spearman`` (regression)
    with scipy. A metric scipy leaves undefined (constant predictions) is NaN, not an error.

    Raises:
        DataError: no examples, as many predictions as labels, an unknown metric, a correlation of one example."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    _check_count(len(labels))
    one = [m for m in metrics if m in CORRELATION_METRICS]
    if one and len(labels) < 2:
        raise DataError(f"{one[0]} correlation needs 2 or more examples, got 1",
                        "score 2 or more examples (genfeat evaluate --max-examples 0 or 2 or more)")
    if len(predictions) != len(labels):
        raise DataError(f"{len(predictions)} predictions for {len(labels)} labelled examples",
                        "predict every example once")
    scorers = {"accuracy": accuracy_score, "f1": f1_score, "matthews": matthews_corrcoef,
               "pearson": lambda y, p: pearsonr(y, p)[0], "spearman": lambda y, p: spearmanr(y, p)[0]}
    unknown = [m for m in metrics if m not in scorers]
    if unknown:
        raise DataError(f"unknown task metric(s) {unknown}", f"use {', '.join(scorers)} (SQuAD: squad_scores)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's ConstantInputWarning: the NaN says it
        return {m: float(scorers[m](list(labels), list(predictions))) for m in metrics}
