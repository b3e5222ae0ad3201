"""Target losses of fine-tuning (thesis §1.4's l_t; GPT-1 Eq. 4-5) on a :class:`~genfeat.models.heads.FineTuneModel`.

- :class:`TaskObjective`: L2, the supervised loss of the task head: cross-entropy over classes or
  over the k choices (the softmax over choices of GPT-1 Fig. 1), squared error for regression,
  and for span extraction the mean of the start and end cross-entropies over the window's positions
  (BERT §4.2), plus with an answerability head the binary cross-entropy of "the answer lies in this
  window" (XLNet's SQuAD 2.0 head). Sums over examples (windows), count = examples.
- :class:`TaskLMObjective`: L1 on the task's own inputs, the auxiliary language-model loss of GPT-1
  (L3 = L2 + λ·L1, Eq. 5; the weight λ is the schedule term's): next-token log-likelihood of every
  real token after the first, through the backbone's own LM head. Sum over tokens, count = tokens.

Batches are :func:`genfeat.tasks.collate` dicts (with ``memory_ids`` for long inputs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch.nn.functional as F
from torch import nn

from ..framework.objective import LossOutput, Objective
from ..models.heads import HeadKind
from .classification import ClassificationObjective
from .span_qa import span_nll

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "summary_index", "context_mask", "memory_ids")
"""Batch keys a FineTuneModel takes; the rest are targets."""


def model_inputs(batch: Mapping[str, Any]) -> dict[str, Any]:
    return {k: batch[k] for k in MODEL_INPUTS if k in batch}


def _unwrap(model: nn.Module) -> nn.Module:
    """The FineTuneModel inside a DistributedDataParallel wrapper (for its adapter and backbone)."""
    return getattr(model, "module", model)


class TaskObjective(Objective):
    """L2 of the head ``kind`` (module docstring).

    Args:
        kind: the head's kind (classification, regression, multiple_choice, span).
    Shapes:
        batch ``labels`` [b] (long; float for regression); span: ``start_positions``,
        ``end_positions`` [b], and ``summary_index`` [b, 1] (a window without the answer points
        both at its summary token).
    Logs:
        ``correct`` (classification, multiple choice), ``squared_error`` (regression),
        ``start_correct`` (span: argmax of the start scores at the gold start).
    """

    name = "task"

    def __init__(self, kind: HeadKind):
        self.kind = kind
        self._classify = ClassificationObjective() if kind in ("classification", "multiple_choice") else None

    def __call__(self, model: nn.Module, batch: Mapping[str, Any]) -> LossOutput:
        if self._classify is not None:
            return self._classify(model, {**model_inputs(batch), "labels": batch["labels"]})
        out = model(**model_inputs(batch))
        if self.kind == "regression":
            err = (out.logits.float() - batch["labels"].float()).pow(2)
            return LossOutput(err.sum(), err.numel(), {"squared_error": float(err.detach().sum())})
        start, end = batch["start_positions"], batch["end_positions"]
        loss = span_nll(out.start_logits, out.end_logits, start, end).sum()
        if out.answer_logits is not None:
            has_answer = (start != batch["summary_index"][:, 0]).float()
            loss = loss + F.binary_cross_entropy_with_logits(out.answer_logits, has_answer, reduction="sum")
        correct = float((out.start_logits.argmax(-1) == start).sum())
        return LossOutput(loss, start.numel(), {"start_correct": correct})


class TaskLMObjective(Objective):
    """L1 on the task inputs: −Σ log P(u_{j+1} | u_{≤j}) over the final segment's real tokens (GPT-1 Eq. 1, 5).

    Shapes: batch ``input_ids``/``attention_mask`` [b, k, t]; the model's hidden [b·k, t, d].
    """

    name = "lm"

    def __call__(self, model: nn.Module, batch: Mapping[str, Any]) -> LossOutput:
        inner = _unwrap(model)
        out = model(**model_inputs(batch))
        ids = batch["input_ids"].reshape(out.hidden.shape[0], -1)                       # [n, t]
        real = batch["attention_mask"].reshape(ids.shape).bool()
        keep = real[:, 1:] & real[:, :-1]          # state j predicts token j+1, both real tokens
        log_probs = inner.adapter.lm_log_probs(inner.backbone, out.hidden[:, :-1][keep], ids[:, 1:][keep])
        return LossOutput(-log_probs.sum(), int(keep.sum()))
