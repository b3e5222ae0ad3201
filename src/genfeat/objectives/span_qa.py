"""The span QA loss of GDAN's discriminator D (thesis §3.2.3): J(·, d) = −Σ log P(a | p, q, d), the answer's
start and end log-probabilities under D's softmaxes over the paragraph, with domain tag d.

:func:`span_nll` is the loss per question, the mean of the start and end cross-entropies (the scaling of
:class:`genfeat.objectives.task.TaskObjective`'s span loss, BERT §4.2; it is half of −log P(start) P(end),
so it differs from the thesis's J only by a constant factor). :class:`SpanQAObjective` computes it on a
batch of D's collate function with a fixed domain: d_true for human questions (J(L, d_true)),
d_gen for generated ones (J(U_G, d_gen)), none for the baselines without tags.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch.nn.functional as F
from torch import Tensor, nn

from ..framework.objective import LossOutput, Objective

D_TRUE, D_GEN = 0, 1
"""Values of the reader's ``domain`` argument."""


def span_nll(start_logits: Tensor, end_logits: Tensor, start: Tensor, end: Tensor) -> Tensor:
    """(−log p(start) − log p(end)) / 2 per question: logits (b, n), gold word positions (b,) -> (b,)."""
    return (F.cross_entropy(start_logits, start, reduction="none")
            + F.cross_entropy(end_logits, end, reduction="none")) / 2


def reader(model: nn.Module) -> nn.Module:
    """D inside the method's container (``model["d"]`` of an ``nn.ModuleDict``, DDP-unwrapped), or the model itself."""
    model = getattr(model, "module", model)
    return model["d"] if isinstance(model, nn.ModuleDict) else model


def read(model: nn.Module, batch: Mapping[str, Any], domain: int | None):
    """D's output on a QA batch, with every question tagged ``domain`` (None: no tag). The batch's tensors but
    the answer (``start``, ``end``) are D's inputs by name: :func:`genfeat.data.gdan.collate_qa`'s for the GA
    reader, :meth:`genfeat.data.gdan.WindowEncoder.collate`'s for a pretrained span reader."""
    tags = None if domain is None else batch["start"].new_full(batch["start"].shape, domain)
    return reader(model)(**{k: v for k, v in batch.items() if k not in ("start", "end")}, domain=tags)


class SpanQAObjective(Objective):
    """J(batch, domain) of D on QA batches (module docstring).

    Args:
        domain: D_TRUE, D_GEN or None (no domain tag).
        name: log name (``qa`` for labelled data, ``qa_gen`` for generated questions).
    Logs:
        ``start_correct``: questions whose argmax start is the gold start.
    """

    def __init__(self, domain: int | None = None, name: str = "qa"):
        self.domain = domain
        self.name = name

    def __call__(self, model: nn.Module, batch: Mapping[str, Any]) -> LossOutput:
        out = read(model, batch, self.domain)
        loss = span_nll(out.start_logits, out.end_logits, batch["start"], batch["end"])
        correct = float((out.start_logits.argmax(-1) == batch["start"]).sum())
        return LossOutput(loss.sum(), loss.numel(), {"start_correct": correct})
