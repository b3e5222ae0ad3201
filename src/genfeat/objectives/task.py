"""Target losses of fine-tuning (thesis §1.4's l_t; GPT-1 Eq. 4-5) on a :class:`~genfeat.models.heads.FineTuneModel`.

:class:`TaskObjective` runs the model once on a task batch and takes from that one forward pass

- L2, the supervised loss of the task head: cross-entropy over classes or over the k choices (the
  softmax over choices of GPT-1 Fig. 1), squared error for regression, and for span extraction the
  mean of the start and end cross-entropies over the window's positions (BERT §4.2), plus with an
  answerability head the binary cross-entropy of "the answer lies in this window" (XLNet's SQuAD 2.0
  head). Sum over examples (windows), count = examples;
- with ``aux_lm_weight`` λ > 0, also L1, GPT-1's auxiliary language-model loss on the task's own inputs
  (:func:`task_lm_loss`), from the same last-layer states through the backbone's own (tied) LM head,
  and returns L3 = L2 + λ·L1 (Eq. 5): both losses read the same states (one set of dropout masks) and
  share one backward pass.

Batches are :func:`genfeat.tasks.collate` dicts (with ``memory_ids`` for long inputs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from ..framework.objective import LossOutput, Objective
from ..models.heads import HeadKind, TaskOutput
from .classification import ClassificationObjective
from .span_qa import span_nll

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "summary_index", "context_mask", "memory_ids")
"""Batch keys a FineTuneModel takes; the rest are targets."""


def model_inputs(batch: Mapping[str, Any]) -> dict[str, Any]:
    return {k: batch[k] for k in MODEL_INPUTS if k in batch}


def _unwrap(model: nn.Module) -> nn.Module:
    """The FineTuneModel inside a DistributedDataParallel wrapper (for its adapter and backbone)."""
    return getattr(model, "module", model)


def task_lm_loss(model: nn.Module, hidden: Tensor, batch: Mapping[str, Any]) -> LossOutput:
    """L1 on the task inputs: −Σ log P(u_{j+1} | u_{≤j}) (GPT-1 Eq. 1, 5) through the backbone's LM head.

    Which tokens it predicts: in every one of the b·k sequences of the batch (both orders of a
    similarity pair, all k choices of a multiple-choice example, each with its own copy of the shared
    text), every real token after the sequence's first, from the state just before it; so ``<start>`` is
    never a target, the delimiter and extract tokens (and Transformer-XL's ``<eos>``) are, like any real
    token, and padding is neither read nor predicted. Only the final segment counts: tokens read as memory
    (``memory_ids``) are not predicted, nor is the final segment's first token from the memory.

    Args:
        model: the FineTuneModel (or its DDP wrapper): its adapter's ``lm_log_probs`` on its backbone
            (causal backbones only; the others raise a ConfigError naming ``aux_lm_weight``).
        hidden: the model output's last-layer states of the final segment.
        batch: the task batch the states were computed from (``input_ids``, ``attention_mask``).
    Shapes: batch ``input_ids``/``attention_mask`` [b, k, t]; hidden [b·k, t, d].
    Returns: LossOutput(sum over the predicted tokens, their number).
    """
    inner = _unwrap(model)
    ids = batch["input_ids"].reshape(hidden.shape[0], -1)                              # [n, t]
    real = batch["attention_mask"].reshape(ids.shape).bool()
    keep = real[:, 1:] & real[:, :-1]          # state j predicts token j+1, both real tokens
    log_probs = inner.adapter.lm_log_probs(inner.backbone, hidden[:, :-1][keep], ids[:, 1:][keep])
    return LossOutput(-log_probs.sum(), int(keep.sum()))


class TaskObjective(Objective):
    """L2 of the head ``kind``, or L3 = L2 + λ·L1 with ``aux_lm_weight`` λ > 0, from one forward pass
    (module docstring).

    Args:
        kind: the head's kind (classification, regression, multiple_choice, span).
        aux_lm_weight: λ of the auxiliary LM loss L1 (:func:`task_lm_loss`); default 0.0: L2 alone, and
            the LM head is not computed.
    Shapes:
        batch ``labels`` [b] (long; float for regression); span: ``start_positions``,
        ``end_positions`` [b], and ``summary_index`` [b, 1] (a window without the answer points
        both at its summary token).
    Returns:
        L2's LossOutput over the examples; with λ > 0 one whose mean is L2 + λ·L1, L2 per example and L1
        per token of the batch (L1's sum enters scaled by examples / tokens), with ``parts`` ``task``
        (L2 and its logs) and ``lm`` (L1 over its tokens), logged as the two terms of a joint schedule
        were. The mean is exactly L3 on one batch; with ``grad_accum`` > 1 or several processes L1 is
        each micro-batch's per-token mean weighted by its examples, not a mean over all the step's tokens.
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
        out = model(**model_inputs(batch))
        task = self._task_loss(out, batch)
        if not self.aux_lm_weight:
            return task
        lm = task_lm_loss(model, out.hidden, batch)
        scale = self.aux_lm_weight * float(task.count) / max(float(lm.count), 1.0)
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
