"""Target losses of fine-tuning (thesis §1.4's l_t; GPT-1 Eq. 4-5) on a :class:`~genfeat.models.heads.FineTuneModel`.

:class:`TaskObjective` runs the model once on a task batch and takes from that one forward pass

- L2, the supervised loss of the task head: cross-entropy over classes or over the k choices (the
  softmax over choices of GPT-1 Fig. 1), squared error for regression, and for span extraction the
  mean of the start and end cross-entropies over the window's positions (BERT §4.2; a start-conditioned
  end head's end scores are those given the gold start, as XLNet trains them), plus with an
  answerability head the binary cross-entropy of "the answer lies in this window" (XLNet's SQuAD 2.0
  head). Sum over examples (windows), count = examples;
- with ``aux_lm_weight`` λ > 0, also L1, GPT-1's auxiliary language-model loss on the task's own inputs
  (:meth:`~genfeat.models.heads.FineTuneModel.next_token_log_probs`, which says which tokens it predicts), from
  the same last-layer states through the backbone's own LM head, computed in the same forward pass,
  and returns L3 = L2 + λ·L1 (Eq. 5): both losses read the same states (one set of dropout masks) and
  share one backward pass.

Batches are :func:`genfeat.tasks.collate` dicts (with ``memory_ids`` for long inputs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch.nn.functional as F
from torch import nn

from ..framework.distributed import all_reduce_sum
from ..framework.objective import LossOutput, Objective
from ..models.heads import HeadKind, TaskOutput
from .classification import ClassificationObjective
from .span_qa import span_nll

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "summary_index", "context_mask", "memory_ids")
"""Batch keys a FineTuneModel takes; the rest are targets."""


def model_inputs(batch: Mapping[str, Any]) -> dict[str, Any]:
    return {k: batch[k] for k in MODEL_INPUTS if k in batch}


class TaskObjective(Objective):
    """L2 of the head ``kind``, or L3 = L2 + λ·L1 with ``aux_lm_weight`` λ > 0, from one forward pass
    (module docstring).

    Args:
        kind: the head's kind (classification, regression, multiple_choice, span).
        aux_lm_weight: λ of the auxiliary LM loss L1 (the model's ``lm_log_probs``); default 0.0: L2 alone, and
            the LM head is not computed.
    Shapes:
        batch ``labels`` [b] (long; float for regression); span: ``start_positions``,
        ``end_positions`` [b], and ``summary_index`` [b, 1] (a window without the answer points
        both at its summary token).
    Returns:
        L2's LossOutput over the examples; with λ > 0 one whose mean is L2 + λ·L1, L2 per example and L1
        per token of the batch (L1's sum enters scaled by examples / tokens), with ``parts`` ``task``
        (L2 and its logs) and ``lm`` (L1 over its tokens), logged as the two terms of a joint schedule
        were. Examples and tokens are counted over the ranks of an initialised process group (every rank
        calls it together: an all-reduce), so the mean is exactly L3 of the global batch, under torchrun
        too; with ``grad_accum`` > 1 L1 is each micro-batch's per-token mean weighted by its examples, not
        a mean over all the step's tokens.
    Logs:
        ``correct`` (classification, multiple choice), ``squared_error`` (regression),
        ``start_correct`` (span: argmax of the start scores at the gold start).
    """

    name = "task"

    def __init__(self, kind: HeadKind, aux_lm_weight: float = 0.0):
        self.kind = kind
        self.aux_lm_weight = aux_lm_weight
        self._classify = ClassificationObjective() if kind in ("classification", "multiple_choice") else None

    def __call__(self, model: nn.Module, batch: Mapping[str, Any]) -> LossOutput:
        extra = {"lm": True} if self.aux_lm_weight else {}
        if self.kind == "span":
            extra["start_positions"] = batch["start_positions"]
        out = model(**model_inputs(batch), **extra)
        task = self._task_loss(out, batch)
        if not self.aux_lm_weight:
            return task
        lm = LossOutput(-out.lm_log_probs.sum(), out.lm_log_probs.numel())
        # examples and tokens of the global batch: a rank's own ratio would weigh its tokens unlike one process's
        examples, tokens = all_reduce_sum([float(task.count), float(lm.count)])
        scale = self.aux_lm_weight * examples / max(tokens, 1.0)
        return LossOutput(task.loss_sum + scale * lm.loss_sum, task.count, parts={"task": task, "lm": lm})

    def _task_loss(self, out: TaskOutput, batch: Mapping[str, Any]) -> LossOutput:
        if self._classify is not None:
            return self._classify.score(out, batch["labels"])
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
